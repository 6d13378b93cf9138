//! `kubectl-inplace`: the kubectl plugin. Its `plan` command previews, offline, what the
//! controller would do in its next reconcile of a CloneSet, from files:
//!
//! ```text
//! kubectl-inplace plan -f cloneset.yaml --pods pods.yaml [--revisions revisions.yaml]
//!     [--pvcs pvcs.yaml] [--update-revision NAME] [--current-revision NAME] [--now RFC3339]
//!     [--partition-rollback] [--pre-download-image [--image-pull-jobs jobs.yaml]]
//!     [-o json|yaml|table]
//! kubectl-inplace plan CLONESET [--update-revision ...] [--now ...] [-o json|yaml|table]
//! ```
//!
//! With a CloneSet name instead of files, the same plan is made from the live objects: the
//! CloneSet, and the pods, PVCs and ControllerRevisions of its namespace as the controller
//! selects them ([`live_inputs`]).
//!
//! - `pods.yaml` is what `kubectl get pods -o yaml` prints, or a stream of Pods; every pod
//!   must match the CloneSet's selector. `--revisions` (optional) is what
//!   `kubectl get controllerrevisions -o yaml` prints; without it the old revisions'
//!   templates are unknown, which matters for in-place decisions. `--pvcs` (optional) is
//!   what `kubectl get pvc -o yaml` prints: claims of vanished pods are reused.
//! - `--pre-download-image` (the gate `PreDownloadImageForInPlaceUpdate`) plans the
//!   ImagePullJobs of image pre-download; `--image-pull-jobs` (optional) is what
//!   `kubectl get imagepulljobs -o yaml` prints (online: listed in the namespace).
//! - The update revision is computed from the template unless `--update-revision` names
//!   it; the current revision is `status.currentRevision` unless `--current-revision`
//!   names it (offline there is no list of revisions to check it against).
//! - Exit codes: 0 planned, 2 bad input (one line on stderr naming the file and the field;
//!   also for bad flags). A CloneSet the CRD would reject is still planned, with warnings
//!   on stderr.
//!
//! Online commands (`rollout status|pause|resume|history|undo`, `set image`, `scale-down`,
//! `warm-up`; `--kubeconfig`, `--context`, `-n` like kubectl) are in [`online`], their
//! decisions in [`day2`]; exit 0 done, 1 rollout/warm-up failed or timed out, 2 bad input or
//! API errors. `completion bash|zsh` prints a completion script; `kubectl inplace <TAB>`
//! completes through `kubectl_complete-inplace` ([`complete`]).
//!
//! Everything here is a library function over texts so that it is tested without a
//! process; the binary only passes `std::env::args` and the standard streams.

pub mod checks;
pub mod complete;
pub mod day2;
pub mod input;
pub mod listing;
pub mod online;
pub mod render;
pub mod view;
pub mod waiting;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use inplace_proto::CloneSet;
use inplace_proto::imagepulljob::ImagePullJob;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;

use self::input::{InputError, Place, Source};
use crate::plan::selector::Selector;
use crate::plan::{Plan, PlanError, PlanOptions, PreDownloadInput, Snapshot};

/// Exit code for bad input.
pub const EXIT_BAD_INPUT: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-inplace",
    version,
    about = "Tools for inplace CloneSets (apps.kruise.io/v1alpha1)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub connect: online::ConnectArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Preview what the controller would do next for a CloneSet, from files.
    Plan(PlanArgs),
    /// Follow, pause or resume a CloneSet's rollout (online, see [`online`]).
    Rollout(online::RolloutArgs),
    /// Pre-pull an image on nodes through an ImagePullJob (online, see [`online`]).
    WarmUp(online::WarmUpArgs),
    /// Change fields of a CloneSet's template (online).
    Set(online::SetArgs),
    /// Delete chosen pods of a CloneSet through spec.scaleStrategy.podsToDelete, lowering
    /// spec.replicas by their number (online).
    ScaleDown(online::ScaleDownArgs),
    /// A CloneSet per revision and per pod: revision, lifecycle state, in-place progress,
    /// readiness, image pulls on the pod's node (online); --watch redraws on every change.
    Get(online::GetArgs),
    /// Print a shell completion script (bash or zsh).
    Completion {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
}

/// Shells `completion` writes scripts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
}

/// The completion script of `shell` for this command line (program `kubectl-inplace`).
pub fn completion(shell: CompletionShell) -> String {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    match shell {
        CompletionShell::Bash => clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut cmd,
            "kubectl-inplace",
            &mut buf,
        ),
        CompletionShell::Zsh => clap_complete::generate(
            clap_complete::Shell::Zsh,
            &mut cmd,
            "kubectl-inplace",
            &mut buf,
        ),
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// Output form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Explained in words.
    #[default]
    Table,
    /// One JSON object.
    Json,
    /// The JSON object as YAML.
    Yaml,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The CloneSet in the cluster (NAME or cloneset/NAME): plan from it, its pods, PVCs
    /// and ControllerRevisions as the controller selects them, instead of from files.
    #[arg(
        value_name = "CLONESET",
        value_parser = online::parse_cloneset,
        conflicts_with_all = ["cloneset", "pods", "revisions", "pvcs", "image_pull_jobs"]
    )]
    pub name: Option<String>,
    /// The CloneSet (YAML or JSON).
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "FILE",
        required_unless_present = "name"
    )]
    pub cloneset: Option<PathBuf>,
    /// Its pods: a List (kubectl get pods -o yaml) or a stream of Pods.
    #[arg(long, value_name = "FILE")]
    pub pods: Option<PathBuf>,
    /// Its ControllerRevisions (kubectl get controllerrevisions -o yaml).
    #[arg(long, value_name = "FILE")]
    pub revisions: Option<PathBuf>,
    /// Its PersistentVolumeClaims (kubectl get pvc -o yaml).
    #[arg(long, value_name = "FILE")]
    pub pvcs: Option<PathBuf>,
    /// Take this revision name as the update revision.
    #[arg(long, value_name = "NAME")]
    pub update_revision: Option<String>,
    /// Take this revision name as the current revision.
    #[arg(long, value_name = "NAME")]
    pub current_revision: Option<String>,
    /// The time to plan at (RFC 3339); defaults to now.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// Raising the partition rolls updated pods back (gate CloneSetPartitionRollback).
    #[arg(long)]
    pub partition_rollback: bool,
    /// Protected CloneSets carry the deletion-protection finalizer (gate
    /// ResourcesDeletionProtection).
    #[arg(long)]
    pub deletion_protection: bool,
    /// Plan the ImagePullJobs of image pre-download for in-place update (gate
    /// PreDownloadImageForInPlaceUpdate).
    #[arg(long)]
    pub pre_download_image: bool,
    /// The ImagePullJobs of its namespace (kubectl get imagepulljobs -o yaml), with
    /// --pre-download-image.
    #[arg(long, value_name = "FILE", requires = "pre_download_image")]
    pub image_pull_jobs: Option<PathBuf>,
    /// Output form.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// What the plan command was given, already parsed.
#[derive(Clone, Debug)]
pub struct Inputs {
    pub cloneset: CloneSet,
    pub pods: Vec<Pod>,
    pub revisions: Vec<ControllerRevision>,
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// The other pods of the namespace that carry an instance id, which the CloneSet may
    /// adopt or must release ([`crate::plan::claim`]); none from files.
    pub unowned_pods: Vec<Pod>,
    /// The ImagePullJobs of its namespace (those it controls are planned from).
    pub image_pull_jobs: Vec<ImagePullJob>,
}

/// Settings of one plan run.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub update_revision: Option<String>,
    pub current_revision: Option<String>,
    pub partition_rollback: bool,
    /// The gate ResourcesDeletionProtection.
    pub deletion_protection: bool,
    /// The gate PreDownloadImageForInPlaceUpdate.
    pub pre_download_image: bool,
}

/// A computed plan and the warnings about the CloneSet.
#[derive(Clone, Debug)]
pub struct Report {
    pub plan: Plan,
    pub warnings: Vec<String>,
    /// The time planned at (the objects a create renders to carry it).
    pub now: Timestamp,
}

/// Parses the texts (see [`input`]) and checks that every pod matches the selector.
pub fn load(
    cloneset: Source<'_>,
    pods: Option<Source<'_>>,
    revisions: Option<Source<'_>>,
    pvcs: Option<Source<'_>>,
) -> Result<Inputs, InputError> {
    let cs = input::cloneset(cloneset)?;
    let pod_list = pods.map(input::pods).transpose()?.unwrap_or_default();
    let revision_list = revisions
        .map(input::revisions)
        .transpose()?
        .unwrap_or_default();
    let pvc_list = pvcs.map(input::pvcs).transpose()?.unwrap_or_default();
    let selector = Selector::parse(&cs.spec.selector)
        .map_err(|e| InputError::field(cloneset.name, "spec.selector", e.to_string()))?;
    if let Some(src) = pods {
        for (i, pod) in pod_list.iter().enumerate() {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            if let Some(requirement) = selector.first_mismatch(&labels) {
                let name = pod.metadata.name.as_deref().unwrap_or("<unnamed>");
                return Err(InputError::field(
                    src.name,
                    format!("pod {name}: metadata.labels"),
                    format!(
                        "do not match the CloneSet's selector ({selector}): {requirement} fails (pod #{})",
                        i + 1
                    ),
                ));
            }
        }
    }
    Ok(Inputs {
        cloneset: cs,
        pods: pod_list,
        revisions: revision_list,
        pvcs: pvc_list,
        unowned_pods: Vec::new(),
        image_pull_jobs: Vec::new(),
    })
}

/// The objects the controller plans `cs` from, out of everything listed in its namespace
/// (as its caches select them): the pods and ControllerRevisions it controls, pods only
/// while they match its selector, and the PVCs it controls or that no CloneSet controls and
/// that match its selector. Each list sorted by name.
pub fn live_inputs(
    cs: CloneSet,
    pods: Vec<Pod>,
    pvcs: Vec<PersistentVolumeClaim>,
    revisions: Vec<ControllerRevision>,
) -> Result<Inputs, InputError> {
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    let selector = Selector::parse(&cs.spec.selector).map_err(|e| {
        InputError::field(
            &format!(
                "cloneset/{}",
                cs.metadata.name.as_deref().unwrap_or_default()
            ),
            "spec.selector",
            e.to_string(),
        )
    })?;
    let matches = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        selector
            .first_mismatch(&meta.labels.clone().unwrap_or_default())
            .is_none()
    };
    let by_name =
        |a: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
         b: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            a.name.cmp(&b.name)
        };
    let (mut pods, unowned): (Vec<Pod>, Vec<Pod>) = pods
        .into_iter()
        .partition(|p| day2::controlled_by(&p.metadata, &uid) && matches(&p.metadata));
    pods.sort_by(|a, b| by_name(&a.metadata, &b.metadata));
    // The controller sees only pods with an instance id (its pod watch is filtered on it).
    let mut unowned_pods: Vec<Pod> = unowned
        .into_iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(inplace_proto::keys::INSTANCE_ID_LABEL))
        })
        .collect();
    unowned_pods.sort_by(|a, b| by_name(&a.metadata, &b.metadata));
    let mut pvcs: Vec<PersistentVolumeClaim> = pvcs
        .into_iter()
        .filter(|p| {
            day2::controlled_by(&p.metadata, &uid)
                || (crate::watch::cloneset_owner(&p.metadata).is_none() && matches(&p.metadata))
        })
        .collect();
    pvcs.sort_by(|a, b| by_name(&a.metadata, &b.metadata));
    let mut revisions: Vec<ControllerRevision> = revisions
        .into_iter()
        .filter(|r| day2::controlled_by(&r.metadata, &uid))
        .collect();
    revisions.sort_by(|a, b| by_name(&a.metadata, &b.metadata));
    Ok(Inputs {
        cloneset: cs,
        pods,
        revisions,
        pvcs,
        unowned_pods,
        image_pull_jobs: Vec::new(),
    })
}

/// Runs the planner on `inputs` at `now`.
pub fn compute(
    inputs: &Inputs,
    settings: &Settings,
    now: Timestamp,
    cloneset_file: &str,
) -> Result<Report, InputError> {
    let status_current = inputs
        .cloneset
        .status
        .as_ref()
        .and_then(|s| s.current_revision.clone());
    let options = PlanOptions {
        partition_rollback: settings.partition_rollback,
        pre_download_image: settings.pre_download_image,
        update_revision_override: settings.update_revision.clone(),
        current_revision_override: settings.current_revision.clone().or(status_current),
        ..PlanOptions::default()
    };
    // The planner reads pods in the controller's cached form.
    let pods = inputs
        .pods
        .iter()
        .map(|p| {
            crate::watch::CachedPod::from_pod(p)
                .map(Arc::new)
                .map_err(|e| {
                    InputError::field(
                        &format!("pod/{}", p.metadata.name.as_deref().unwrap_or_default()),
                        "",
                        e.to_string(),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let jobs: Vec<ImagePullJob> =
        crate::plan::predownload::controlled_jobs(&inputs.cloneset, &inputs.image_pull_jobs)
            .cloned()
            .collect();
    let snapshot = Snapshot {
        cloneset: &inputs.cloneset,
        pods: &pods,
        pvcs: &inputs.pvcs,
        revisions: &inputs.revisions,
        nodes: &[],
        now,
        options: &options,
        pods_to_delete_seen: &crate::plan::pods_to_delete::NO_NAMES,
        // As the controller: the jobs the CloneSet controls, each new one recording the
        // update order of its nodes.
        pre_download: settings.pre_download_image.then_some(PreDownloadInput {
            jobs: &jobs,
            update_order: true,
        }),
    };
    let mut plan = crate::plan::plan(snapshot).map_err(|e| plan_error(cloneset_file, &e))?;
    let mut warnings = checks::warnings(&inputs.cloneset);
    let before = steps_before_planning(inputs, settings);
    if !before.is_empty() {
        warnings.push(
            "the first steps (the deletion-protection finalizer, adopting or releasing pods) are a reconcile of their own: the controller plans the rest once it sees them written".to_owned(),
        );
        plan.steps.splice(0..0, before);
    }
    let current = &plan.revisions.current_revision;
    let known = |name: &str| {
        inputs
            .revisions
            .iter()
            .any(|r| r.metadata.name.as_deref() == Some(name))
    };
    if *current != plan.revisions.update_revision && !known(current) {
        warnings.push(format!(
            "revision {current} is not among the given revisions (--revisions): its template is unknown, so no pod of it can be judged for an in-place update"
        ));
    }
    Ok(Report {
        plan,
        warnings,
        now,
    })
}

/// The steps the controller takes before it plans (`runtime::reconcile_inner`): the
/// deletion-protection finalizer (a write ends the reconcile, a held deletion goes on), then
/// the adoption and release of pods (unless the CloneSet is being deleted).
fn steps_before_planning(inputs: &Inputs, settings: &Settings) -> Vec<crate::plan::Step> {
    let cs = &inputs.cloneset;
    match crate::plan::protection::planned(cs, settings.deletion_protection) {
        Some(step) if !matches!(step.action, crate::plan::Action::HoldDeletion { .. }) => {
            vec![step]
        }
        held => held
            .into_iter()
            .chain(crate::plan::claim::steps(cs, &inputs.unowned_pods))
            .collect(),
    }
}

fn plan_error(file: &str, e: &PlanError) -> InputError {
    match e {
        PlanError::Selector(inner) => InputError::field(file, "spec.selector", inner.to_string()),
        PlanError::Template(inner) => InputError::field(file, "spec.template", inner.clone()),
        PlanError::Revision(inner) => InputError::new(file, Place::Nowhere, inner.to_string()),
    }
}

/// Renders `report` in `format` (JSON ends with a newline).
pub fn render(report: &Report, inputs: &Inputs, format: Format) -> String {
    let shown = || {
        let mut v = render::json(&report.plan);
        render::with_created_objects(
            &mut v,
            &report.plan,
            &inputs.cloneset,
            &inputs.revisions,
            report.now,
        );
        v
    };
    match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&shown())
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
            s.push('\n');
            s
        }
        Format::Yaml => {
            serde_saphyr::to_string(&shown()).unwrap_or_else(|e| format!("error: {e}\n"))
        }
        Format::Table => render::table(&inputs.cloneset, &report.plan, inputs.pods.len()),
    }
}

fn read(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|e| {
        InputError::new(
            &path.display().to_string(),
            Place::Nowhere,
            format!("cannot read: {e}"),
        )
    })
}

fn parse_now(text: Option<&str>) -> Result<Timestamp, InputError> {
    match text {
        None => Ok(Timestamp::now()),
        Some(t) => t.parse::<Timestamp>().map_err(|e| {
            InputError::new(
                "--now",
                Place::Nowhere,
                format!("not an RFC 3339 time: {e}"),
            )
        }),
    }
}

fn plan_settings(args: &PlanArgs) -> Settings {
    Settings {
        update_revision: args.update_revision.clone(),
        current_revision: args.current_revision.clone(),
        partition_rollback: args.partition_rollback,
        deletion_protection: args.deletion_protection,
        pre_download_image: args.pre_download_image,
    }
}

/// `plan NAME`: the same plan as from files, from the live objects ([`live_inputs`]).
fn live_plan_command(
    args: &PlanArgs,
    name: &str,
    connect: &online::ConnectArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), online::OnlineError> {
    let bad = |e: InputError| online::OnlineError::BadInput(e.to_string());
    let now = parse_now(args.now.as_deref()).map_err(bad)?;
    let ((cs, pods, pvcs, revisions), jobs) = runtime()?.block_on(async {
        let (client, ns) = online::connect(connect).await?;
        let objects = online::plan_objects(&client, &ns, name).await?;
        let jobs = if args.pre_download_image {
            online::image_pull_jobs(&client, &ns).await?
        } else {
            None
        };
        Ok::<_, online::OnlineError>((objects, jobs))
    })?;
    let mut inputs = live_inputs(cs, pods, pvcs, revisions).map_err(bad)?;
    let label = format!("cloneset/{name}");
    let mut settings = plan_settings(args);
    match jobs {
        Some(jobs) => inputs.image_pull_jobs = jobs,
        None if settings.pre_download_image => {
            let _ = writeln!(
                err,
                "warning: {label}: imagepulljobs.apps.kruise.io is not served: no image pre-download (nor in the controller)"
            );
            settings.pre_download_image = false;
        }
        None => {}
    }
    let report = compute(&inputs, &settings, now, &label).map_err(bad)?;
    for w in &report.warnings {
        let _ = writeln!(err, "warning: {label}: {w}");
    }
    out.write_all(render(&report, &inputs, args.output).as_bytes())?;
    Ok(())
}

fn plan_command(
    args: &PlanArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), InputError> {
    let now = parse_now(args.now.as_deref())?;
    let Some(cs_path) = args.cloneset.as_deref() else {
        return Err(InputError::new(
            "-f",
            Place::Nowhere,
            "give -f FILE or a CloneSet NAME".to_string(),
        ));
    };
    let cs_name = cs_path.display().to_string();
    let cs_text = read(cs_path)?;
    let pods_name = args.pods.as_ref().map(|p| p.display().to_string());
    let pods_text = args.pods.as_deref().map(read).transpose()?;
    let rev_name = args.revisions.as_ref().map(|p| p.display().to_string());
    let rev_text = args.revisions.as_deref().map(read).transpose()?;
    let pvc_name = args.pvcs.as_ref().map(|p| p.display().to_string());
    let pvc_text = args.pvcs.as_deref().map(read).transpose()?;
    let source = |name: &Option<String>, text: &Option<String>| -> Option<(String, String)> {
        Some((name.clone()?, text.clone()?))
    };
    let pods = source(&pods_name, &pods_text);
    let revs = source(&rev_name, &rev_text);
    let claims = source(&pvc_name, &pvc_text);
    let mut inputs = load(
        Source {
            name: &cs_name,
            text: &cs_text,
        },
        pods.as_ref().map(|(name, text)| Source { name, text }),
        revs.as_ref().map(|(name, text)| Source { name, text }),
        claims.as_ref().map(|(name, text)| Source { name, text }),
    )?;
    if let Some(path) = args.image_pull_jobs.as_deref() {
        let (name, text) = (path.display().to_string(), read(path)?);
        inputs.image_pull_jobs = input::image_pull_jobs(Source {
            name: &name,
            text: &text,
        })?;
    }
    let report = compute(&inputs, &plan_settings(args), now, &cs_name)?;
    for w in &report.warnings {
        let _ = writeln!(err, "warning: {cs_name}: {w}");
    }
    let _ = out.write_all(render(&report, &inputs, args.output).as_bytes());
    Ok(())
}

/// Runs the command line `args` (program name first); returns the exit code.
pub fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.get(1).is_some_and(|a| a == complete::COMPLETE_ARG) {
        use clap::CommandFactory;
        let words: Vec<String> = args
            .iter()
            .skip(2)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let cmd = Cli::command();
        let names = complete::cloneset_request(&cmd, &words)
            .map(|connect| cloneset_names(&connect))
            .unwrap_or_default();
        let _ = out.write_all(complete::answer_with(&cmd, &words, &names).as_bytes());
        return 0;
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = e.exit_code();
            let text = e.render().to_string();
            let _ = if code == 0 {
                out.write_all(text.as_bytes())
            } else {
                err.write_all(text.as_bytes())
            };
            return if code == 0 { 0 } else { EXIT_BAD_INPUT };
        }
    };
    match cli.command {
        Command::Plan(args) if args.name.is_some() => {
            let name = args.name.clone().unwrap_or_default();
            online_exit(live_plan_command(&args, &name, &cli.connect, out, err), err)
        }
        Command::Plan(args) => match plan_command(&args, out, err) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(err, "error: {e}");
                EXIT_BAD_INPUT
            }
        },
        Command::Rollout(args) => {
            let result = run_rollout(args, &cli.connect, out, err);
            online_exit(result, err)
        }
        Command::WarmUp(args) => online_exit(run_warm_up(args, &cli.connect, out), err),
        Command::Set(args) => {
            let result = run_set(args, &cli.connect, out, err);
            online_exit(result, err)
        }
        Command::ScaleDown(args) => online_exit(run_scale_down(args, &cli.connect, out), err),
        Command::Get(args) => online_exit(run_get(args, &cli.connect, out), err),
        Command::Completion { shell } => {
            let _ = out.write_all(completion(shell).as_bytes());
            0
        }
    }
}

/// The names of the CloneSets of the namespace `connect` reaches, for completion: none when
/// the server cannot be asked within 3 s (a completion prints no error).
fn cloneset_names(connect: &online::ConnectArgs) -> Vec<String> {
    let Ok(rt) = runtime() else {
        return Vec::new();
    };
    rt.block_on(async {
        let list = async {
            let (client, ns) = online::connect(connect).await.ok()?;
            let api: kube::Api<CloneSet> = kube::Api::namespaced(client, &ns);
            api.list(&kube::api::ListParams::default()).await.ok()
        };
        match tokio::time::timeout(std::time::Duration::from_secs(3), list).await {
            Ok(Some(list)) => online::select::sorted_names(&list.items),
            _ => Vec::new(),
        }
    })
}

fn online_exit(result: Result<(), online::OnlineError>, err: &mut dyn Write) -> i32 {
    match result {
        Ok(()) => 0,
        Err(online::OnlineError::Reported(code)) => code,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            e.exit_code()
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, online::OnlineError> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn run_rollout(
    args: online::RolloutArgs,
    connect: &online::ConnectArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), online::OnlineError> {
    use online::RolloutCommand as R;
    use online::select::Manner;
    use online::select::for_each;
    let (name, select) = args.command.target();
    let target = online::target(name, select)?;
    runtime()?.block_on(async {
        let (client, ns) = online::connect(connect).await?;
        let api: kube::Api<CloneSet> = kube::Api::namespaced(client.clone(), &ns);
        match args.command {
            R::Status { timeout, .. } => {
                for_each(
                    &api,
                    &target,
                    Manner::STATUS,
                    None,
                    out,
                    err,
                    async |name: &str, out: &mut dyn Write| {
                        online::rollout_status(&client, &ns, name, timeout, out).await
                    },
                )
                .await
            }
            R::Pause { output, .. } | R::Resume { output, .. } => {
                let paused = matches!(args.command, R::Pause { .. });
                for_each(
                    &api,
                    &target,
                    Manner::PATCH,
                    output.output,
                    out,
                    err,
                    async |name: &str, out: &mut dyn Write| {
                        online::set_paused(&api, name, paused, output.output, out).await
                    },
                )
                .await
            }
            R::History {
                revision, output, ..
            } => {
                for_each(
                    &api,
                    &target,
                    Manner::QUIET,
                    output.output,
                    out,
                    err,
                    async |name: &str, out: &mut dyn Write| {
                        online::rollout_history(&client, &ns, name, revision, output.output, out)
                            .await
                    },
                )
                .await
            }
            R::Restart { output, .. } => {
                for_each(
                    &api,
                    &target,
                    Manner::PATCH,
                    output.output,
                    out,
                    err,
                    async |name: &str, out: &mut dyn Write| {
                        online::rollout_restart(&api, name, output.output, out).await
                    },
                )
                .await
            }
            R::Undo {
                to_revision,
                output,
                ..
            } => {
                for_each(
                    &api,
                    &target,
                    Manner::QUIET,
                    output.output,
                    out,
                    err,
                    async |name: &str, out: &mut dyn Write| {
                        online::rollout_undo(&client, &ns, name, to_revision, output.output, out)
                            .await
                    },
                )
                .await
            }
        }
    })
}

fn run_warm_up(
    args: online::WarmUpArgs,
    connect: &online::ConnectArgs,
    out: &mut dyn Write,
) -> Result<(), online::OnlineError> {
    let job = online::warm_up_job(&args).map_err(online::OnlineError::BadInput)?;
    runtime()?.block_on(async {
        let (client, ns) = online::connect(connect).await?;
        let api = kube::Api::namespaced(client, &ns);
        let wait = args.wait.then_some(args.timeout);
        online::warm_up(api, &job, wait, args.output.output, out)
            .await
            .map(|_| ())
    })
}

fn run_set(
    args: online::SetArgs,
    connect: &online::ConnectArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), online::OnlineError> {
    let online::SetCommand::Image {
        words,
        select,
        output,
    } = args.command;
    let (target, images) = online::image_target(&words, select.selector.as_deref())?;
    runtime()?.block_on(async {
        let (client, ns) = online::connect(connect).await?;
        let api: kube::Api<CloneSet> = kube::Api::namespaced(client, &ns);
        online::select::for_each(
            &api,
            &target,
            online::select::Manner::QUIET,
            output.output,
            out,
            err,
            async |name: &str, out: &mut dyn Write| {
                online::set_image(&api, name, &images, output.output, out).await
            },
        )
        .await
    })
}

fn run_get(
    args: online::GetArgs,
    connect: &online::ConnectArgs,
    out: &mut dyn Write,
) -> Result<(), online::OnlineError> {
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let scope = online::scope(
        args.cloneset.as_deref(),
        args.all_namespaces,
        args.selector.as_deref(),
    )?;
    runtime()?.block_on(async {
        let (client, ns) = online::connect(connect).await?;
        online::get(
            &client,
            &ns,
            &scope,
            args.watch,
            args.output.output,
            terminal,
            out,
        )
        .await
    })
}

fn run_scale_down(
    args: online::ScaleDownArgs,
    connect: &online::ConnectArgs,
    out: &mut dyn Write,
) -> Result<(), online::OnlineError> {
    runtime()?.block_on(async {
        let (client, ns) = online::connect(connect).await?;
        online::scale_down(
            &client,
            &ns,
            &args.cloneset,
            &args.pods,
            args.output.output,
            out,
        )
        .await
    })
}

#[cfg(test)]
mod tests;
