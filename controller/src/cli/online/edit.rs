//! `set image` and `scale-down`: spec edits of the CloneSet by patch (the patches are
//! built in [`crate::cli::day2`]).

use std::io::Write;

use inplace_proto::CloneSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

use crate::cli::day2;

use super::{DataFormat, OnlineError, get_cloneset, json_patch, report};

/// `set image`: the JSON patch of [`day2::set_image_patch`].
pub async fn set_image(
    api: &Api<CloneSet>,
    name: &str,
    args: &[String],
    output: Option<DataFormat>,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    let pairs = day2::parse_image_args(args)?;
    let cs = get_cloneset(api, name).await?;
    let Some(ops) = day2::set_image_patch(&cs, &pairs)? else {
        return report(
            out,
            output,
            &cs,
            &format!("cloneset.apps.kruise.io/{name} image unchanged"),
        );
    };
    let after = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::<()>::Json(json_patch(&ops)?),
        )
        .await?;
    report(
        out,
        output,
        &after,
        &format!("cloneset.apps.kruise.io/{name} image updated"),
    )
}

/// `scale-down`: checks that every pod is the CloneSet's, then the merge patch of
/// [`day2::scale_down_patch`].
pub async fn scale_down(
    client: &Client,
    ns: &str,
    name: &str,
    pods: &[String],
    output: Option<DataFormat>,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    let pods = day2::parse_pods(pods)?;
    let api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let cs = get_cloneset(&api, name).await?;
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut owned = std::collections::BTreeSet::new();
    for pod in &pods {
        if let Some(p) = pod_api.get_opt(pod).await?
            && day2::controlled_by(&p.metadata, &uid)
        {
            owned.insert(pod.clone());
        }
    }
    let plan = day2::scale_down_patch(&cs, &pods, &owned)?;
    let after = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&plan.patch))
        .await?;
    let mut line = format!(
        "cloneset.apps.kruise.io/{name} scaled down to {} replicas, deleting {}",
        plan.replicas,
        plan.added.join(", ")
    );
    if plan.added.is_empty() {
        line = format!("cloneset.apps.kruise.io/{name} unchanged");
    }
    if !plan.already.is_empty() {
        line.push_str(&format!(" ({} already to delete)", plan.already.join(", ")));
    }
    report(out, output, &after, &line)
}
