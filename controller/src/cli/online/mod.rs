//! The plugin's commands that talk to the API server:
//!
//! ```text
//! kubectl-inplace rollout status (CLONESET | -l SELECTOR) [--timeout 5m] [-n NS] [--kubeconfig FILE] [--context C]
//! kubectl-inplace rollout pause|resume (CLONESET | -l SELECTOR) [-o json|yaml]
//! kubectl-inplace rollout history (CLONESET | -l SELECTOR) [--revision N] [-o json|yaml]
//! kubectl-inplace rollout undo (CLONESET | -l SELECTOR) [--to-revision N] [-o json|yaml]
//! kubectl-inplace rollout restart (CLONESET | -l SELECTOR) [-o json|yaml]
//! kubectl-inplace get CLONESET [--watch] [-o json|yaml]
//! kubectl-inplace get [-A] [-l SELECTOR] [--watch] [-o json|yaml]
//! kubectl-inplace set image (CLONESET | -l SELECTOR) CONTAINER=IMAGE... [-o json|yaml]
//! kubectl-inplace scale-down CLONESET --pods a,b [-o json|yaml]
//! kubectl-inplace warm-up IMAGE (--nodes n1,n2 | --selector k=v,...) [--parallelism N]
//!     [--wait [--timeout 10m]] [-o json|yaml]
//! ```
//!
//! CLONESET is `NAME` or `cloneset/NAME` ([`super::day2::parse_target`]). `-l SELECTOR`
//! instead acts on every matching CloneSet of the namespace in name order (`rollout status`
//! waits for each in turn), see [`select`].
//!
//! The decisions (progress line, when a rollout is done or failed, the ImagePullJob to
//! create, when a warm-up is over; history, undo, image and scale-down patches in
//! [`super::day2`]) are pure functions, unit-tested; the async functions only read, watch
//! and patch.
//!
//! `--kubeconfig` defaults to `$KUBECONFIG` then `~/.kube/config` (then in-cluster, unless
//! `--context` names a context); `-n` defaults to the context's namespace.
//!
//! This module holds the arguments, the errors, the connection and the output; the
//! commands are in `rollout` (status, pause/resume, restart, history, undo), `get` (the
//! view, and what `plan NAME` reads), `edit` (set image, scale-down) and `warm_up`;
//! `stores` holds what the watches of `get --watch` and `rollout status` have seen.

mod edit;
mod get;
mod rollout;
pub mod select;
pub mod stores;
#[cfg(test)]
mod tests;
mod warm_up;

pub use edit::{scale_down, set_image};
pub use get::{Scope, get, image_pull_jobs, named, plan_objects, read_view, scope};
pub use rollout::{
    Progress, Verdict, pause_patch, progress, rollout_history, rollout_restart, rollout_status,
    rollout_undo, set_paused, status_block,
};
pub use select::{SelectArgs, Target, image_target, target};
pub use warm_up::{parse_match_labels, warm_up, warm_up_job, warm_up_progress};

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use inplace_proto::CloneSet;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Api, Client, Config};

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
    /// Failures already printed one by one (a command over several CloneSets); the exit
    /// code of the last.
    #[error("failed (see the errors above)")]
    Reported(i32),
}

impl OnlineError {
    /// 1 for a rollout/warm-up that failed or timed out, 2 for everything else (bad
    /// input, unreachable or refusing API server).
    pub fn exit_code(&self) -> i32 {
        match self {
            OnlineError::Timeout(_) | OnlineError::Failed(_) => EXIT_FAILED,
            OnlineError::Reported(code) => *code,
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
        cloneset: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        /// How long to wait (e.g. 90s, 5m, 1h).
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Pause the rollout (spec.updateStrategy.paused=true).
    Pause {
        #[arg(value_parser = parse_cloneset)]
        cloneset: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Resume the rollout (spec.updateStrategy.paused=false).
    Resume {
        #[arg(value_parser = parse_cloneset)]
        cloneset: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// The CloneSet's revisions (ControllerRevisions by .revision): change cause and
    /// image changes of each; with --revision N, that revision's pod template.
    History {
        #[arg(value_parser = parse_cloneset)]
        cloneset: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
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
        cloneset: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Write a revision's template back into spec.template (default: the newest revision
    /// that is not the current template); pods update in place where they can.
    Undo {
        #[arg(value_parser = parse_cloneset)]
        cloneset: Option<String>,
        #[command(flatten)]
        select: SelectArgs,
        /// The revision to go back to.
        #[arg(long, value_name = "N")]
        to_revision: Option<i64>,
        #[command(flatten)]
        output: OutputArgs,
    },
}

impl RolloutCommand {
    /// The CloneSet named and the label selector given (every subcommand takes either).
    pub fn target(&self) -> (Option<&str>, Option<&str>) {
        match self {
            Self::Status {
                cloneset, select, ..
            }
            | Self::Pause {
                cloneset, select, ..
            }
            | Self::Resume {
                cloneset, select, ..
            }
            | Self::History {
                cloneset, select, ..
            }
            | Self::Restart {
                cloneset, select, ..
            }
            | Self::Undo {
                cloneset, select, ..
            } => (cloneset.as_deref(), select.selector.as_deref()),
        }
    }
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
        /// The CloneSet (not with -l), then CONTAINER=IMAGE...
        #[arg(value_name = "CLONESET|CONTAINER=IMAGE", required = true)]
        words: Vec<String>,
        #[command(flatten)]
        select: SelectArgs,
        #[command(flatten)]
        output: OutputArgs,
    },
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// The CloneSet; without it, one line per CloneSet of the namespace.
    #[arg(value_parser = parse_cloneset)]
    pub cloneset: Option<String>,
    /// Without a name: the CloneSets of every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Without a name: only the CloneSets matching this label selector (k=v,k2!=v2,...).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
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

fn json_patch(ops: &serde_json::Value) -> Result<json_patch::Patch, OnlineError> {
    serde_json::from_value(ops.clone()).map_err(|e| OnlineError::Encode(e.to_string()))
}
