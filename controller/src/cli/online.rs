//! The plugin's commands that talk to the API server:
//!
//! ```text
//! kubectl-inplace rollout status CLONESET [--timeout 5m] [-n NS] [--kubeconfig FILE] [--context C]
//! kubectl-inplace rollout pause|resume CLONESET [-o json|yaml]
//! kubectl-inplace rollout history CLONESET [--revision N] [-o json|yaml]
//! kubectl-inplace rollout undo CLONESET [--to-revision N] [-o json|yaml]
//! kubectl-inplace rollout restart CLONESET [-o json|yaml]
//! kubectl-inplace get CLONESET [--watch] [-o json|yaml]
//! kubectl-inplace set image CLONESET CONTAINER=IMAGE... [-o json|yaml]
//! kubectl-inplace scale-down CLONESET --pods a,b [-o json|yaml]
//! kubectl-inplace warm-up IMAGE (--nodes n1,n2 | --selector k=v,...) [--parallelism N]
//!     [--wait [--timeout 10m]] [-o json|yaml]
//! ```
//!
//! CLONESET is `NAME` or `cloneset/NAME` ([`super::day2::parse_target`]).
//!
//! The decisions (progress line, when a rollout is done or failed, the ImagePullJob to
//! create, when a warm-up is over; history, undo, image and scale-down patches in
//! [`super::day2`]) are pure functions, unit-tested; the async functions only read, watch
//! and patch.
//!
//! `--kubeconfig` defaults to `$KUBECONFIG` then `~/.kube/config` (then in-cluster, unless
//! `--context` names a context); `-n` defaults to the context's namespace.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use futures::StreamExt;
use inplace_proto::{
    CloneSet, ImagePullJob, ImagePullJobNodeSelector, ImagePullJobSpec, ImagePullJobStatus,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Api, Client, Config};

use super::day2;

/// Exit code of a rollout or warm-up that failed or timed out.
pub const EXIT_FAILED: i32 = 1;

/// Errors of the online commands.
#[derive(Debug, thiserror::Error)]
pub enum OnlineError {
    #[error("kubeconfig: {0}")]
    Config(String),
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("{kind} {name} not found in namespace {namespace}")]
    NotFound {
        kind: &'static str,
        name: String,
        namespace: String,
    },
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Failed(String),
    #[error("{0}")]
    BadInput(String),
    #[error("the watch of {0} ended")]
    WatchEnded(String),
    #[error("watch: {0}")]
    Watch(#[from] watcher::Error),
    #[error("output: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Day2(#[from] super::day2::Day2Error),
    #[error("encoding the output: {0}")]
    Encode(String),
}

impl OnlineError {
    /// 1 for a rollout/warm-up that failed or timed out, 2 for everything else (bad
    /// input, unreachable or refusing API server).
    pub fn exit_code(&self) -> i32 {
        match self {
            OnlineError::Timeout(_) | OnlineError::Failed(_) => EXIT_FAILED,
            _ => super::EXIT_BAD_INPUT,
        }
    }
}

/// Where to connect, like kubectl's flags (accepted before or after the subcommand; the
/// offline `plan` ignores them).
#[derive(Clone, Debug, Default, Args)]
pub struct ConnectArgs {
    /// Path of the kubeconfig file.
    #[arg(long, value_name = "FILE", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace (default: the context's).
    #[arg(short = 'n', long, value_name = "NS", global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, value_name = "NAME", global = true)]
    pub context: Option<String>,
}

/// Output form of commands whose output is data (`-o json|yaml`); without it they print
/// words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DataFormat {
    Json,
    Yaml,
}

/// `-o json|yaml`.
#[derive(Clone, Copy, Debug, Default, Args)]
pub struct OutputArgs {
    /// Print the resulting object (or the data) as JSON or YAML instead of words.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<DataFormat>,
}

/// `value` as JSON (pretty, with a final newline) or YAML.
pub fn encode<T: serde::Serialize>(value: &T, format: DataFormat) -> Result<String, OnlineError> {
    match format {
        DataFormat::Json => {
            let mut s = serde_json::to_string_pretty(value)
                .map_err(|e| OnlineError::Encode(e.to_string()))?;
            s.push('\n');
            Ok(s)
        }
        DataFormat::Yaml => {
            serde_saphyr::to_string(value).map_err(|e| OnlineError::Encode(e.to_string()))
        }
    }
}

/// A CloneSet argument: `NAME` or `cloneset/NAME` (see [`super::day2::parse_target`]).
pub fn parse_cloneset(text: &str) -> Result<String, String> {
    super::day2::parse_target(text).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Follow a CloneSet's rollout until its updated pods are ready (exit 0), it fails
    /// (Progressing=False, exit 1) or the timeout passes (exit 1).
    Status {
        #[arg(value_parser = parse_cloneset)]
        cloneset: String,
        /// How long to wait (e.g. 90s, 5m, 1h).
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Pause the rollout (spec.updateStrategy.paused=true).
    Pause {
        #[arg(value_parser = parse_cloneset)]
        cloneset: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Resume the rollout (spec.updateStrategy.paused=false).
    Resume {
        #[arg(value_parser = parse_cloneset)]
        cloneset: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// The CloneSet's revisions (ControllerRevisions by .revision): change cause and
    /// image changes of each; with --revision N, that revision's pod template.
    History {
        #[arg(value_parser = parse_cloneset)]
        cloneset: String,
        /// Print the pod template of this revision.
        #[arg(long, value_name = "N")]
        revision: Option<i64>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Restart every pod's containers in place (no pod recreated) as a new revision, under
    /// maxUnavailable, partition and lifecycle hooks: sets the template annotation
    /// kubectl.kubernetes.io/restartedAt to now.
    Restart {
        #[arg(value_parser = parse_cloneset)]
        cloneset: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Write a revision's template back into spec.template (default: the newest revision
    /// that is not the current template); pods update in place where they can.
    Undo {
        #[arg(value_parser = parse_cloneset)]
        cloneset: String,
        /// The revision to go back to.
        #[arg(long, value_name = "N")]
        to_revision: Option<i64>,
        #[command(flatten)]
        output: OutputArgs,
    },
}

#[derive(Debug, Args)]
pub struct SetArgs {
    #[command(subcommand)]
    pub command: SetCommand,
}

#[derive(Debug, Subcommand)]
pub enum SetCommand {
    /// Set container images of the CloneSet's template: CONTAINER=IMAGE... (`*=IMAGE`
    /// sets every container).
    Image {
        #[arg(value_parser = parse_cloneset)]
        cloneset: String,
        #[arg(value_name = "CONTAINER=IMAGE", required = true)]
        images: Vec<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
}

#[derive(Debug, Args)]
pub struct GetArgs {
    #[arg(value_parser = parse_cloneset)]
    pub cloneset: String,
    /// Keep watching: redraw on every change (in place on a terminal, appended otherwise).
    #[arg(short = 'w', long)]
    pub watch: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ScaleDownArgs {
    #[arg(value_parser = parse_cloneset)]
    pub cloneset: String,
    /// Pods of the CloneSet to delete, comma separated; replicas drop by their number.
    #[arg(long, value_name = "POD,...", required = true)]
    pub pods: Vec<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
pub struct WarmUpArgs {
    /// The image to pull.
    pub image: String,
    /// Node names, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        conflicts_with = "selector",
        required_unless_present = "selector"
    )]
    pub nodes: Vec<String>,
    /// Node label selector: k=v[,k2=v2].
    #[arg(long, short = 'l')]
    pub selector: Option<String>,
    /// Nodes pulling at the same time.
    #[arg(long)]
    pub parallelism: Option<i32>,
    /// Follow the job's status until it completes (exit 1 when a node failed).
    #[arg(long)]
    pub wait: bool,
    /// With --wait: how long to wait.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub timeout: Duration,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `90` (seconds), or a humantime duration: `90s`, `5m`, `1h`, `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    humantime::parse_duration(text).map_err(|e| format!("bad duration {text:?}: {e}"))
}

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

/// A client and the namespace to use.
pub async fn connect(args: &ConnectArgs) -> Result<(Client, String), OnlineError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| OnlineError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| OnlineError::Config(format!("{}: {e}", path.display())))?
        }
        // A context names an entry of the kubeconfig: no in-cluster fallback.
        (None, Some(_)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| OnlineError::Config(e.to_string()))?,
        (None, None) => Config::infer()
            .await
            .map_err(|e| OnlineError::Config(e.to_string()))?,
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config)?;
    Ok((client, namespace))
}

/// `rollout status`: prints a line per change until done (Ok), failed or timed out.
pub async fn rollout_status(
    api: Api<CloneSet>,
    name: &str,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), OnlineError> {
    let namespace = api.namespace().unwrap_or_default().to_string();
    let watch = async {
        let mut stream = watcher::watch_object(api, name).boxed();
        let mut last = String::new();
        while let Some(event) = stream.next().await {
            let Some(cs) = event? else {
                return Err(OnlineError::NotFound {
                    kind: "cloneset",
                    name: name.to_string(),
                    namespace: namespace.clone(),
                });
            };
            let p = progress(&cs);
            if p.line != last {
                writeln!(out, "{}", p.line)?;
                last = p.line.clone();
            }
            match p.verdict {
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

/// What `plan NAME` plans from: the CloneSet, and every pod, PVC and ControllerRevision of
/// its namespace (selected by [`super::live_inputs`]).
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

/// The view of `name` ([`super::view::build`]) from the objects now. NodeImages are
/// cluster-scoped: when they cannot be listed (no permission), pulls show as unknown.
pub async fn read_view(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<super::view::View, OnlineError> {
    let (cs, pods, _, revisions) = plan_objects(client, ns, name).await?;
    let node_images = Api::<inplace_proto::NodeImage>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    Ok(super::view::build(&cs, &pods, &revisions, &node_images))
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
            None => super::view::table(&view),
        };
        if last.as_ref() != Some(&text) {
            let first = last.is_none();
            let frame = match output {
                None => super::view::frame(&text, terminal, first),
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

/// Prints `object` in `format`, or `line` when no format was asked for.
fn report<T: serde::Serialize>(
    out: &mut dyn Write,
    format: Option<DataFormat>,
    object: &T,
    line: &str,
) -> Result<(), OnlineError> {
    match format {
        Some(f) => out.write_all(encode(object, f)?.as_bytes())?,
        None => writeln!(out, "{line}")?,
    }
    Ok(())
}

/// The CloneSet `name`, or [`OnlineError::NotFound`].
pub async fn get_cloneset(api: &Api<CloneSet>, name: &str) -> Result<CloneSet, OnlineError> {
    api.get_opt(name)
        .await?
        .ok_or_else(|| OnlineError::NotFound {
            kind: "cloneset",
            name: name.to_string(),
            namespace: api.namespace().unwrap_or_default().to_string(),
        })
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

fn json_patch(ops: &serde_json::Value) -> Result<json_patch::Patch, OnlineError> {
    serde_json::from_value(ops.clone()).map_err(|e| OnlineError::Encode(e.to_string()))
}

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use inplace_proto::CloneSetCondition;

    fn cs(yaml: &str) -> CloneSet {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const BASE: &str = "apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata: {name: demo, namespace: default, generation: 3}
spec:
  replicas: 4
  selector: {matchLabels: {app: demo}}
  template: {metadata: {labels: {app: demo}}, spec: {containers: [{name: app, image: a}]}}
";

    fn with_status(status: &str) -> CloneSet {
        cs(&format!("{BASE}status: {status}\n"))
    }

    #[test]
    fn no_status_is_progressing() {
        let p = progress(&cs(BASE));
        assert_eq!(p.verdict, Verdict::Progressing);
        assert!(p.line.contains("no status"), "{}", p.line);
    }

    #[test]
    fn done_when_expected_updated_pods_are_ready_at_the_current_generation() {
        let p = progress(&with_status(
            "{observedGeneration: 3, replicas: 4, readyReplicas: 4, availableReplicas: 4, \
             updatedReplicas: 2, updatedReadyReplicas: 2, expectedUpdatedReplicas: 2}",
        ));
        assert_eq!(p.verdict, Verdict::Done);
        assert_eq!(p.line, "updated 2/2, ready 4, available 4");
    }

    #[test]
    fn stale_generation_is_not_done() {
        let p = progress(&with_status(
            "{observedGeneration: 2, replicas: 4, readyReplicas: 4, availableReplicas: 4, \
             updatedReplicas: 4, updatedReadyReplicas: 4, expectedUpdatedReplicas: 4}",
        ));
        assert_eq!(p.verdict, Verdict::Progressing);
        assert!(p.line.contains("observe generation 3, saw 2"), "{}", p.line);
    }

    #[test]
    fn expected_defaults_to_replicas_and_unready_updated_pods_are_shown() {
        let p = progress(&with_status(
            "{observedGeneration: 3, replicas: 4, readyReplicas: 3, availableReplicas: 2, \
             updatedReplicas: 4, updatedReadyReplicas: 3}",
        ));
        assert_eq!(p.verdict, Verdict::Progressing);
        assert_eq!(p.line, "updated 4/4, ready 3, available 2, updated ready 3");
    }

    #[test]
    fn progressing_false_fails_with_reason_and_message() {
        let mut c = with_status(
            "{observedGeneration: 3, replicas: 4, updatedReplicas: 1, updatedReadyReplicas: 0, \
             expectedUpdatedReplicas: 4}",
        );
        c.status
            .as_mut()
            .unwrap()
            .conditions
            .push(CloneSetCondition {
                type_: "Progressing".into(),
                status: "False".into(),
                reason: Some("ProgressDeadlineExceeded".into()),
                message: Some("CloneSet demo has timed out progressing.".into()),
                ..CloneSetCondition::default()
            });
        assert_eq!(
            progress(&c).verdict,
            Verdict::Failed(
                "ProgressDeadlineExceeded: CloneSet demo has timed out progressing.".into()
            )
        );
    }

    #[test]
    fn paused_is_shown_while_progressing() {
        let mut c = with_status("{observedGeneration: 3, replicas: 4, updatedReplicas: 1}");
        c.spec
            .update_strategy
            .get_or_insert_with(Default::default)
            .paused = true;
        assert!(progress(&c).line.ends_with("(paused)"));
    }

    #[test]
    fn pause_patch_shape() {
        assert_eq!(
            pause_patch(true).to_string(),
            r#"{"spec":{"updateStrategy":{"paused":true}}}"#
        );
        assert_eq!(
            pause_patch(false).to_string(),
            r#"{"spec":{"updateStrategy":{"paused":false}}}"#
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2s").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("5m3").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn durations_take_humantimes_other_forms() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("1h 30m").unwrap(), ms(5_400_000));
        assert_eq!(parse_duration("2min").unwrap(), ms(120_000));
        assert_eq!(parse_duration("1d").unwrap(), ms(86_400_000));
        assert_eq!(parse_duration("1500ms").unwrap(), ms(1_500));
        assert_eq!(parse_duration(" 45s ").unwrap(), ms(45_000));
    }

    fn warm(nodes: &[&str], selector: Option<&str>, parallelism: Option<i32>) -> WarmUpArgs {
        WarmUpArgs {
            image: "reg/app:v2".into(),
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            selector: selector.map(str::to_string),
            parallelism,
            wait: false,
            timeout: Duration::from_secs(60),
            output: OutputArgs::default(),
        }
    }

    #[test]
    fn warm_up_job_by_names_and_by_labels() {
        let job = warm_up_job(&warm(&["n2", "n1", "n2"], None, Some(2))).unwrap();
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(v["metadata"]["generateName"], "warm-up-");
        assert!(v["metadata"].get("name").is_none());
        assert_eq!(v["spec"]["image"], "reg/app:v2");
        assert_eq!(
            v["spec"]["selector"]["names"],
            serde_json::json!(["n1", "n2"])
        );
        assert_eq!(v["spec"]["parallelism"], 2);

        let job = warm_up_job(&warm(&[], Some("zone=a, disk=ssd"), None)).unwrap();
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(
            v["spec"]["selector"]["matchLabels"],
            serde_json::json!({"disk": "ssd", "zone": "a"})
        );
        assert!(v["spec"].get("parallelism").is_none());
    }

    #[test]
    fn warm_up_job_rejects_bad_input() {
        assert!(warm_up_job(&warm(&[], None, None)).is_err());
        assert!(warm_up_job(&warm(&["n1"], Some("a=b"), None)).is_err());
        assert!(warm_up_job(&warm(&["n1"], None, Some(0))).is_err());
        assert!(warm_up_job(&warm(&[" "], None, None)).is_err());
        assert!(warm_up_job(&warm(&[], Some("novalue"), None)).is_err());
        assert!(warm_up_job(&warm(&[], Some("=v"), None)).is_err());
    }

    #[test]
    fn warm_up_outcome() {
        assert_eq!(warm_up_progress(None).1, None);
        let mut s = ImagePullJobStatus {
            desired: 2,
            active: 1,
            succeeded: 1,
            ..ImagePullJobStatus::default()
        };
        let (line, outcome) = warm_up_progress(Some(&s));
        assert_eq!(line, "succeeded 1/2, active 1, failed 0");
        assert_eq!(outcome, None);
        s.completion_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        s.active = 0;
        s.succeeded = 2;
        assert_eq!(warm_up_progress(Some(&s)).1, Some(Ok(())));
        s.succeeded = 1;
        s.failed = 1;
        s.failed_nodes = vec!["n2".into()];
        assert_eq!(
            warm_up_progress(Some(&s)).1,
            Some(Err("1 node(s) failed: n2".into()))
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(OnlineError::Timeout(Duration::from_secs(1)).exit_code(), 1);
        assert_eq!(OnlineError::Failed("x".into()).exit_code(), 1);
        assert_eq!(OnlineError::Config("x".into()).exit_code(), 2);
    }
}
