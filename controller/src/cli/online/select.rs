//! Which CloneSets a command acts on: the one named, or with `-l SELECTOR` every CloneSet
//! of the namespace whose labels match, in name order, like kubectl's `rollout`, `set image`
//! and friends. What to say when a selector matches nothing follows kubectl 1.33 per command
//! ([`NoneFound`]).

use std::io::Write;

use clap::Args;
use inplace_proto::CloneSet;
use kube::Api;
use kube::api::ListParams;

use super::{DataFormat, OnlineError, parse_cloneset};

/// `-l/--selector`, for commands that take one CloneSet name otherwise.
#[derive(Clone, Debug, Default, Args)]
pub struct SelectArgs {
    /// Instead of a name: every CloneSet of the namespace matching this label selector
    /// (k=v,k2!=v2,...), one after the other in name order.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
}

/// The CloneSets a command acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The CloneSet of this name.
    Named(String),
    /// Every CloneSet whose labels match this selector.
    Selected(String),
}

/// kubectl's words for a name given together with a selector.
pub const NAME_AND_SELECTOR: &str = "name cannot be provided when a selector is specified";

/// The target of a NAME argument and `-l`: one of them, not both, not neither.
pub fn target(name: Option<&str>, selector: Option<&str>) -> Result<Target, OnlineError> {
    match (name, selector) {
        (Some(_), Some(_)) => Err(OnlineError::BadInput(NAME_AND_SELECTOR.into())),
        (Some(n), None) => Ok(Target::Named(n.to_owned())),
        (None, Some(s)) => Ok(Target::Selected(s.to_owned())),
        (None, None) => Err(OnlineError::BadInput(
            "required resource not specified: give a CloneSet NAME or -l SELECTOR".into(),
        )),
    }
}

/// `set image`'s positional words: `CLONESET CONTAINER=IMAGE...`, or with `-l` only
/// `CONTAINER=IMAGE...` (a name never holds `=`, an image setting always does).
pub fn image_target(
    words: &[String],
    selector: Option<&str>,
) -> Result<(Target, Vec<String>), OnlineError> {
    let (name, images) = match words.split_first() {
        Some((first, rest)) if !first.contains('=') => (
            Some(parse_cloneset(first).map_err(OnlineError::BadInput)?),
            rest,
        ),
        _ => (None, words),
    };
    let target = target(name.as_deref(), selector)?;
    if images.is_empty() {
        return Err(OnlineError::BadInput(
            "at least one image update is required (CONTAINER=IMAGE)".into(),
        ));
    }
    Ok((target, images.to_vec()))
}

/// The names `target` stands for in `api`'s namespace: the name itself (whether it exists
/// is the command's to find out), or the matching CloneSets sorted by name.
pub async fn names(api: &Api<CloneSet>, target: &Target) -> Result<Vec<String>, OnlineError> {
    match target {
        Target::Named(n) => Ok(vec![n.clone()]),
        Target::Selected(selector) => {
            let list = api
                .list(&ListParams::default().labels(selector))
                .await
                .map_err(|e| {
                    // The server's own words (a bad selector is a 400 with the reason).
                    let why = match &e {
                        kube::Error::Api(status) => status.message.clone(),
                        other => other.to_string(),
                    };
                    OnlineError::BadInput(format!(
                        "listing the CloneSets matching {selector:?}: {why}"
                    ))
                })?;
            Ok(sorted_names(&list.items))
        }
    }
}

/// The names of `sets`, sorted.
pub fn sorted_names(sets: &[CloneSet]) -> Vec<String> {
    let mut names: Vec<String> = sets
        .iter()
        .filter_map(|cs| cs.metadata.name.clone())
        .collect();
    names.sort();
    names
}

/// What kubectl 1.33 does when a selector matches nothing: `rollout status|pause|resume|
/// restart` say so on stderr, `rollout history|undo` and `set image` print nothing; all
/// exit 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoneFound {
    Say,
    Silent,
}

/// How a command goes over several CloneSets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manner {
    pub none_found: NoneFound,
    /// Stop at the first failure (`rollout status`: a failed rollout is the answer) rather
    /// than report it and go on with the others (the edits).
    pub stop_at_failure: bool,
}

impl Manner {
    /// `rollout status`.
    pub const STATUS: Manner = Manner {
        none_found: NoneFound::Say,
        stop_at_failure: true,
    };
    /// `rollout pause|resume|restart`.
    pub const PATCH: Manner = Manner {
        none_found: NoneFound::Say,
        stop_at_failure: false,
    };
    /// `rollout history|undo`, `set image`.
    pub const QUIET: Manner = Manner {
        none_found: NoneFound::Silent,
        stop_at_failure: false,
    };
}

/// kubectl's line for a namespace without matching resources.
pub fn no_resources_line(namespace: &str) -> String {
    format!("No resources found in {namespace} namespace.\n")
}

/// Runs `one` on each name of `target` in `api`'s namespace ([`over`]).
pub async fn for_each<F>(
    api: &Api<CloneSet>,
    target: &Target,
    manner: Manner,
    output: Option<DataFormat>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    one: F,
) -> Result<(), OnlineError>
where
    F: for<'a> AsyncFnMut(&'a str, &'a mut dyn Write) -> Result<(), OnlineError>,
{
    let names = names(api, target).await?;
    let ns = api.namespace().unwrap_or_default().to_owned();
    over(&names, &ns, manner, output, out, err, one).await
}

/// Runs `one` on each of `names` (of namespace `ns`), kubectl's way: a failure of one is
/// reported on `err` and the rest still run (unless [`Manner::stop_at_failure`]); the
/// result is the last failure. Several objects printed as YAML are separated by `---`. No
/// names: [`NoneFound`].
pub async fn over<F>(
    names: &[String],
    ns: &str,
    manner: Manner,
    output: Option<DataFormat>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    mut one: F,
) -> Result<(), OnlineError>
where
    F: for<'a> AsyncFnMut(&'a str, &'a mut dyn Write) -> Result<(), OnlineError>,
{
    if names.is_empty() {
        if manner.none_found == NoneFound::Say {
            err.write_all(no_resources_line(ns).as_bytes())?;
        }
        return Ok(());
    }
    let several = names.len() > 1;
    let mut last = Ok(());
    for (i, name) in names.iter().enumerate() {
        if i > 0 && output == Some(DataFormat::Yaml) {
            out.write_all(b"---\n")?;
        }
        if let Err(e) = one(name, out).await {
            if several {
                writeln!(err, "error: {e}")?;
            }
            last = Err(e);
            if manner.stop_at_failure {
                break;
            }
        }
    }
    match last {
        // Each failure was printed already; the exit code is the last one's.
        Err(e) if several => Err(OnlineError::Reported(e.exit_code())),
        other => other,
    }
}
