//! `warm-up`: the ImagePullJob to create (pure), its progress, and the command that creates
//! it and, with `--wait`, follows it.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use inplace_proto::{ImagePullJob, ImagePullJobNodeSelector, ImagePullJobSpec, ImagePullJobStatus};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;

use super::{DataFormat, OnlineError, WarmUpArgs, report};

/// Parses `k=v[,k2=v2]` (what `--selector` takes; only equality).
pub fn parse_match_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("bad selector term {part:?}: expected key=value"))?;
        let k = k.trim();
        let v = v.trim().trim_start_matches('=');
        if k.is_empty() {
            return Err(format!("bad selector term {part:?}: empty key"));
        }
        out.insert(k.to_string(), v.to_string());
    }
    if out.is_empty() {
        return Err("empty selector".into());
    }
    Ok(out)
}

/// The ImagePullJob `warm-up` creates (named by the server from `warm-up-`).
pub fn warm_up_job(args: &WarmUpArgs) -> Result<ImagePullJob, String> {
    if args.image.trim().is_empty() {
        return Err("empty image".into());
    }
    let selector = match (&args.selector, args.nodes.is_empty()) {
        (Some(s), true) => ImagePullJobNodeSelector {
            match_labels: Some(parse_match_labels(s)?),
            ..ImagePullJobNodeSelector::default()
        },
        (None, false) => {
            let mut names: Vec<String> = args
                .nodes
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect();
            names.sort();
            names.dedup();
            if names.is_empty() {
                return Err("--nodes names no node".into());
            }
            ImagePullJobNodeSelector {
                names,
                ..ImagePullJobNodeSelector::default()
            }
        }
        _ => return Err("give exactly one of --nodes and --selector".into()),
    };
    if let Some(p) = args.parallelism
        && p < 1
    {
        return Err(format!("--parallelism must be at least 1, got {p}"));
    }
    let mut job = ImagePullJob::new(
        "",
        ImagePullJobSpec {
            image: args.image.clone(),
            selector: Some(selector),
            parallelism: args.parallelism.map(IntOrString::Int),
            ..ImagePullJobSpec::default()
        },
    );
    job.metadata.name = None;
    job.metadata.generate_name = Some("warm-up-".into());
    Ok(job)
}

/// A warm-up's progress line and, once complete, whether every node succeeded.
pub fn warm_up_progress(
    status: Option<&ImagePullJobStatus>,
) -> (String, Option<Result<(), String>>) {
    let Some(s) = status else {
        return ("no status yet (is the controller running?)".into(), None);
    };
    let line = format!(
        "succeeded {}/{}, active {}, failed {}",
        s.succeeded, s.desired, s.active, s.failed
    );
    if s.completion_time.is_none() {
        return (line, None);
    }
    let outcome = if s.failed > 0 {
        let mut msg = format!("{} node(s) failed", s.failed);
        if !s.failed_nodes.is_empty() {
            msg.push_str(&format!(": {}", s.failed_nodes.join(", ")));
        }
        if !s.message.is_empty() {
            msg.push_str(&format!(" ({})", s.message));
        }
        Err(msg)
    } else {
        Ok(())
    };
    (line, Some(outcome))
}

/// `warm-up`: creates the job, prints its name, and with `wait` follows it.
pub async fn warm_up(
    api: Api<ImagePullJob>,
    job: &ImagePullJob,
    wait: Option<Duration>,
    output: Option<DataFormat>,
    out: &mut dyn Write,
) -> Result<String, OnlineError> {
    let created = api.create(&PostParams::default(), job).await?;
    let name = created.metadata.name.clone().unwrap_or_default();
    report(
        out,
        output,
        &created,
        &format!("imagepulljob.apps.kruise.io/{name} created"),
    )?;
    let Some(timeout) = wait else {
        return Ok(name);
    };
    let namespace = api.namespace().unwrap_or_default().to_string();
    let follow = async {
        let mut stream = watcher::watch_object(api, &name).boxed();
        let mut last = String::new();
        while let Some(event) = stream.next().await {
            let Some(job) = event? else {
                return Err(OnlineError::NotFound {
                    kind: "imagepulljob",
                    name: name.clone(),
                    namespace: namespace.clone(),
                });
            };
            let (line, outcome) = warm_up_progress(job.status.as_ref());
            if line != last {
                writeln!(out, "{line}")?;
                last = line;
            }
            match outcome {
                Some(Ok(())) => {
                    writeln!(out, "imagepulljob {name} completed")?;
                    return Ok(());
                }
                Some(Err(msg)) => {
                    return Err(OnlineError::Failed(format!("imagepulljob {name}: {msg}")));
                }
                None => {}
            }
        }
        Err(OnlineError::WatchEnded(format!("imagepulljob {name}")))
    };
    tokio::time::timeout(timeout, follow)
        .await
        .map_err(|_| OnlineError::Timeout(timeout))??;
    Ok(name)
}
