//! `rollout status|pause|resume|restart|history|undo`: the progress reading and the pause
//! patch (pure), and the commands that read, watch and patch the CloneSet.

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use inplace_proto::CloneSet;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::cli::day2;

use super::{DataFormat, OnlineError, encode, get_cloneset, json_patch, report};

/// Where a rollout stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every expected updated pod is ready and the status is of the current generation.
    Done,
    /// Still going.
    Progressing,
    /// `Progressing=False`, with the condition's reason and message.
    Failed(String),
}

/// One progress reading of a CloneSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// `updated x/y, ready z, available w` (plus what is awaited, if anything).
    pub line: String,
    pub verdict: Verdict,
}

/// Reads a CloneSet's status: the progress line and whether the rollout is over.
///
/// Done needs `status.observedGeneration >= metadata.generation` and
/// `updatedReadyReplicas >= expectedUpdatedReplicas` (defaulting to `spec.replicas` when
/// the controller did not write it). Failed is a `Progressing` condition with status
/// `False` (the controller's `ProgressDeadlineExceeded`).
pub fn progress(cs: &CloneSet) -> Progress {
    let generation = cs.metadata.generation.unwrap_or(0);
    let Some(status) = cs.status.as_ref() else {
        return Progress {
            line: "no status yet (is the controller running?)".into(),
            verdict: Verdict::Progressing,
        };
    };
    let expected = status.expected_updated_replicas.unwrap_or(cs.replicas());
    let mut line = format!(
        "updated {}/{}, ready {}, available {}",
        status.updated_replicas, expected, status.ready_replicas, status.available_replicas
    );
    if status.updated_ready_replicas != status.updated_replicas {
        line.push_str(&format!(
            ", updated ready {}",
            status.updated_ready_replicas
        ));
    }
    let observed = status.observed_generation.unwrap_or(0);
    let failed = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing" && c.status == "False");
    let verdict = if let Some(c) = failed {
        let reason = c.reason.as_deref().unwrap_or("Progressing=False");
        let message = c.message.as_deref().unwrap_or("");
        Verdict::Failed(if message.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}: {message}")
        })
    } else if observed < generation {
        line.push_str(&format!(
            " (waiting for the controller to observe generation {generation}, saw {observed})"
        ));
        Verdict::Progressing
    } else if status.updated_ready_replicas >= expected {
        Verdict::Done
    } else {
        Verdict::Progressing
    };
    if cs.spec.update_strategy.as_ref().is_some_and(|s| s.paused) && verdict == Verdict::Progressing
    {
        line.push_str(" (paused)");
    }
    Progress { line, verdict }
}

/// The merge patch of `rollout pause` (`true`) and `rollout resume` (`false`).
pub fn pause_patch(paused: bool) -> serde_json::Value {
    serde_json::json!({"spec": {"updateStrategy": {"paused": paused}}})
}

/// What `rollout status` prints of one reading: the progress line, then a `waiting:` line
/// per reason the rollout waits ([`crate::cli::waiting::reasons`]; those the progress line
/// already says, an unobserved generation and a failure, are left out).
pub fn status_block(cs: &CloneSet, pods: &[k8s_openapi::api::core::v1::Pod]) -> (String, Verdict) {
    use crate::cli::waiting::{Waiting, reasons};
    let p = progress(cs);
    let mut block = p.line;
    for w in reasons(cs, pods, k8s_openapi::jiff::Timestamp::now()) {
        if !matches!(w, Waiting::NotObserved { .. } | Waiting::Failed { .. }) {
            block.push_str(&format!("\nwaiting: {w}"));
        }
    }
    (block, p.verdict)
}

/// `rollout status`: prints the progress (and why it waits) on each change until done
/// (Ok), failed or timed out. One watch of the CloneSet and one of the namespace's pods
/// feed stores ([`super::stores`]); nothing is listed again per event.
pub async fn rollout_status(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    use super::stores::{self, Change, Kind, Stores};
    let watch = async {
        let mut changes = futures::stream::select_all([
            stores::watch(
                Api::<CloneSet>::namespaced(client.clone(), ns),
                watcher::Config::default().fields(&format!("metadata.name={name}")),
                Kind::CloneSet,
                Change::CloneSet,
            )
            .boxed(),
            stores::watch(
                Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns),
                watcher::Config::default(),
                Kind::Pod,
                Change::Pod,
            )
            .boxed(),
        ]);
        let mut stores = Stores::new(&[Kind::CloneSet, Kind::Pod]);
        let mut last = String::new();
        while let Some(change) = changes.next().await {
            stores.apply(change)?;
            if !stores.ready() {
                continue;
            }
            let cs = super::named(&stores, ns, name)?;
            let (block, verdict) = status_block(&cs, &stores.pods.objects());
            if block != last {
                writeln!(out, "{block}")?;
                last = block;
            }
            match verdict {
                Verdict::Done => {
                    writeln!(out, "cloneset {name} successfully rolled out")?;
                    return Ok(());
                }
                Verdict::Failed(msg) => {
                    return Err(OnlineError::Failed(format!("cloneset {name}: {msg}")));
                }
                Verdict::Progressing => {}
            }
        }
        Err(OnlineError::WatchEnded(format!("cloneset {name}")))
    };
    tokio::time::timeout(timeout, watch)
        .await
        .map_err(|_| OnlineError::Timeout(timeout))?
}

/// `rollout pause` / `rollout resume`: the merge patch; prints what changed.
pub async fn set_paused(
    api: &Api<CloneSet>,
    name: &str,
    paused: bool,
    output: Option<DataFormat>,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    let before = get_cloneset(api, name).await?;
    let was = before
        .spec
        .update_strategy
        .as_ref()
        .is_some_and(|s| s.paused);
    let word = if paused { "paused" } else { "resumed" };
    if was == paused {
        return report(
            out,
            output,
            &before,
            &format!("cloneset.apps.kruise.io/{name} already {word}"),
        );
    }
    let after = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&pause_patch(paused)),
        )
        .await?;
    report(
        out,
        output,
        &after,
        &format!("cloneset.apps.kruise.io/{name} {word}"),
    )
}

/// `rollout restart`: the merge patch of [`day2::restart_patch`] with the time now, then
/// what to know about how the restart goes ([`day2::restart_notes`]).
pub async fn rollout_restart(
    api: &Api<CloneSet>,
    name: &str,
    output: Option<DataFormat>,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    get_cloneset(api, name).await?;
    let at = k8s_openapi::jiff::Timestamp::now().to_string();
    let after = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&day2::restart_patch(&at)),
        )
        .await?;
    let mut line = format!("cloneset.apps.kruise.io/{name} restarted");
    for note in day2::restart_notes(&after) {
        line.push_str(&format!("\nnote: {note}"));
    }
    report(out, output, &after, &line)
}

/// The ControllerRevisions of the namespace that `cs` controls (by owner UID).
async fn revisions_of(
    client: &Client,
    ns: &str,
    cs: &CloneSet,
) -> Result<Vec<ControllerRevision>, OnlineError> {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await?;
    Ok(day2::owned_revisions(cs, &list.items))
}

/// `rollout history`: the table (or `-o` data) of the revisions; with `revision`, that
/// revision's pod template (YAML by default).
pub async fn rollout_history(
    client: &Client,
    ns: &str,
    name: &str,
    revision: Option<i64>,
    output: Option<DataFormat>,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    let api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let cs = get_cloneset(&api, name).await?;
    let revisions = revisions_of(client, ns, &cs).await?;
    if let Some(n) = revision {
        let (rev, template) = day2::revision_template(&cs, &revisions, n)?;
        if output.is_none() {
            writeln!(
                out,
                "cloneset.apps.kruise.io/{name} revision {n} ({})",
                rev.metadata.name.as_deref().unwrap_or_default()
            )?;
        }
        let text = encode(&template, output.unwrap_or(DataFormat::Yaml))?;
        out.write_all(text.as_bytes())?;
        return Ok(());
    }
    let entries = day2::history(&cs, &revisions);
    match output {
        Some(f) => out.write_all(encode(&entries, f)?.as_bytes())?,
        None => out.write_all(day2::history_table(name, &entries).as_bytes())?,
    }
    Ok(())
}

/// `rollout undo`: the JSON patch of [`day2::undo_patch`].
pub async fn rollout_undo(
    client: &Client,
    ns: &str,
    name: &str,
    to: Option<i64>,
    output: Option<DataFormat>,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    let api: Api<CloneSet> = Api::namespaced(client.clone(), ns);
    let cs = get_cloneset(&api, name).await?;
    let revisions = revisions_of(client, ns, &cs).await?;
    let undo = day2::undo_patch(&cs, &revisions, to)?;
    let after = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::<()>::Json(json_patch(&undo.patch)?),
        )
        .await?;
    report(
        out,
        output,
        &after,
        &format!(
            "cloneset.apps.kruise.io/{name} rolled back to revision {}",
            undo.revision
        ),
    )
}
