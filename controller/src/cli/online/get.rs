//! What is read from the cluster for one CloneSet: the objects `plan NAME` plans from, and
//! the view `get` prints (once, or on every change with `--watch`).

use std::io::Write;

use futures::StreamExt;
use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Client};

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

/// The view of `name` ([`crate::cli::view::build`]) from the objects now. NodeImages are
/// cluster-scoped: when they cannot be listed (no permission), pulls show as unknown.
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
    Ok(crate::cli::view::build(
        &cs,
        &pods,
        &revisions,
        &node_images,
    ))
}

/// `get`: the view once, or with `watch` again on every event of the namespace's pods, the
/// CloneSet and the NodeImages, printed only when it changed. `terminal`: stdout is a
/// terminal (each redraw clears the screen); data output (`-o`) is never cleared, YAML
/// documents are separated by `---`.
pub async fn get(
    client: &Client,
    ns: &str,
    name: &str,
    watch: bool,
    output: Option<DataFormat>,
    terminal: bool,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    use kube::runtime::WatchStreamExt;
    let mut changes = if watch {
        let pods = watcher(
            Api::<Pod>::namespaced(client.clone(), ns),
            watcher::Config::default(),
        )
        .default_backoff()
        .map(|_| ());
        let cloneset = watcher(
            Api::<CloneSet>::namespaced(client.clone(), ns),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff()
        .map(|_| ());
        let node_images = watcher(
            Api::<inplace_proto::NodeImage>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .filter_map(|e| std::future::ready(e.ok().map(|_| ())));
        Some(futures::stream::select_all([
            pods.boxed(),
            cloneset.boxed(),
            node_images.boxed(),
        ]))
    } else {
        None
    };
    let mut last: Option<String> = None;
    loop {
        let view = read_view(client, ns, name).await?;
        let text = match output {
            Some(f) => encode(&view, f)?,
            None => crate::cli::view::table(&view),
        };
        if last.as_ref() != Some(&text) {
            let first = last.is_none();
            let frame = match output {
                None => crate::cli::view::frame(&text, terminal, first),
                Some(DataFormat::Yaml) if !first => format!("---\n{text}"),
                Some(_) => text.clone(),
            };
            out.write_all(frame.as_bytes())?;
            out.flush()?;
            last = Some(text);
        }
        let Some(stream) = changes.as_mut() else {
            return Ok(());
        };
        if stream.next().await.is_none() {
            return Err(OnlineError::WatchEnded(format!("cloneset {name}")));
        }
    }
}
