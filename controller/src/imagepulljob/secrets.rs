//! Pull secrets of ImagePullJobs, mirrored into the controller's own namespace.
//!
//! The daemon on every node reads Secrets only in the controller's namespace
//! (`inplace-system`): a node cannot read the Secrets of other namespaces. So, as
//! OpenKruise does with its `kruise-daemon-config` namespace, the controller copies each
//! Secret a job names in `pullSecrets` into its namespace and writes the copy, not the
//! original, into the NodeImages:
//!
//! - the copy is named `<source namespace>.<source name>` (a namespace has no dot, so
//!   two sources never share a name; a name over 253 characters ends in a hash instead);
//! - labelled `imagepulljobs.kruise.io/source-uid: <uid of the source>`, annotated
//!   `imagepulljobs.kruise.io/source-key: <ns>/<name>` and
//!   `imagepulljobs.kruise.io/references: <ns>/<job>,…` (the jobs that use it), the keys
//!   OpenKruise uses;
//! - its `type` and `data` are the source's, rewritten when the source changes (read
//!   again at every pass, at least every [`RESYNC`]);
//! - it is deleted when no job names it any more (the job was deleted, or changed), or
//!   when the source is gone. A copy and its jobs are in different namespaces, so no
//!   owner reference can do that: the references annotation does.
//!
//! The decisions are pure ([`wanted`], [`desired_copy`], [`steps`]); [`run`] does the I/O.
//! The controller so needs `get` on Secrets in every namespace (by name only: no list, no
//! watch) and get/list/watch/create/update/delete only in its own namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use inplace_proto::imagepulljob::ImagePullJob;
use inplace_proto::nodeimage::ReferenceObject;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

/// Label: the uid of the Secret a copy was made from.
pub const SOURCE_UID_LABEL: &str = "imagepulljobs.kruise.io/source-uid";
/// Annotation: `namespace/name` of the Secret a copy was made from.
pub const SOURCE_KEY_ANNOTATION: &str = "imagepulljobs.kruise.io/source-key";
/// Annotation: `namespace/name` of every ImagePullJob using a copy, comma-separated, sorted.
pub const REFERENCES_ANNOTATION: &str = "imagepulljobs.kruise.io/references";
/// Every copy is read again this often (a source's new content reaches its copy).
pub const RESYNC: Duration = Duration::from_secs(60);

/// `(namespace, name)` of a Secret.
pub type Key = (String, String);

/// The name of the copy of `namespace/name`.
pub fn copy_name(namespace: &str, name: &str) -> String {
    let full = format!("{namespace}.{name}");
    if full.len() <= 253 {
        return full;
    }
    let hash = {
        use std::hash::Hasher as _;
        // FNV-1a: a name must not change between versions of the controller, which std's
        // hasher does not promise.
        let mut h = fnv::FnvHasher::default();
        h.write(full.as_bytes());
        format!("{:016x}", h.finish())
    };
    let keep = 253 - hash.len() - 1;
    let mut end = keep.min(full.len());
    while !full.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}.{hash}", full[..end].trim_end_matches(['.', '-']))
}

/// The NodeImage reference of `namespace/name` as the daemon must read it: the copy in
/// `mirror_namespace`.
pub fn mirrored(reference: &ReferenceObject, mirror_namespace: &str) -> ReferenceObject {
    if reference.namespace == mirror_namespace {
        return reference.clone();
    }
    ReferenceObject {
        namespace: mirror_namespace.to_owned(),
        name: copy_name(&reference.namespace, &reference.name),
        mode: reference.mode.clone(),
    }
}

/// `refs` with every reference outside `mirror_namespace` replaced by its copy, without
/// duplicates, in their first order.
pub fn mirror_references(refs: &[ReferenceObject], mirror_namespace: &str) -> Vec<ReferenceObject> {
    let mut out: Vec<ReferenceObject> = Vec::new();
    for r in refs {
        let m = mirrored(r, mirror_namespace);
        if !out
            .iter()
            .any(|o| o.namespace == m.namespace && o.name == m.name)
        {
            out.push(m);
        }
    }
    out
}

/// Source Secret → the jobs (`namespace/name`) that name it, over jobs not being deleted.
/// Secrets of `mirror_namespace` itself are read there directly and not copied.
pub fn wanted<'a>(
    jobs: impl IntoIterator<Item = &'a ImagePullJob>,
    mirror_namespace: &str,
) -> BTreeMap<Key, BTreeSet<String>> {
    let mut out: BTreeMap<Key, BTreeSet<String>> = BTreeMap::new();
    for job in jobs {
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = job.namespace().unwrap_or_default();
        if ns == mirror_namespace {
            continue;
        }
        for s in &job.spec.pull_secrets {
            if s.is_empty() {
                continue;
            }
            out.entry((ns.clone(), s.clone()))
                .or_default()
                .insert(format!("{ns}/{}", job.name_any()));
        }
    }
    out
}

/// The copy of `source` in `mirror_namespace`, used by `references`.
pub fn desired_copy(
    source: &Secret,
    mirror_namespace: &str,
    references: &BTreeSet<String>,
) -> Secret {
    let ns = source.namespace().unwrap_or_default();
    let name = source.name_any();
    Secret {
        metadata: ObjectMeta {
            name: Some(copy_name(&ns, &name)),
            namespace: Some(mirror_namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                SOURCE_UID_LABEL.to_owned(),
                source.uid().unwrap_or_default(),
            )])),
            annotations: Some(BTreeMap::from([
                (SOURCE_KEY_ANNOTATION.to_owned(), format!("{ns}/{name}")),
                (
                    REFERENCES_ANNOTATION.to_owned(),
                    references.iter().cloned().collect::<Vec<_>>().join(","),
                ),
            ])),
            ..ObjectMeta::default()
        },
        type_: source.type_.clone(),
        data: source.data.clone(),
        immutable: None,
        string_data: None,
    }
}

/// Whether `copy` already says what `want` says (its content, source and references).
fn same(copy: &Secret, want: &Secret) -> bool {
    let label = |s: &Secret, k: &str| s.labels().get(k).cloned();
    let anno = |s: &Secret, k: &str| s.annotations().get(k).cloned();
    copy.type_ == want.type_
        && copy.data == want.data
        && label(copy, SOURCE_UID_LABEL) == label(want, SOURCE_UID_LABEL)
        && anno(copy, SOURCE_KEY_ANNOTATION) == anno(want, SOURCE_KEY_ANNOTATION)
        && anno(copy, REFERENCES_ANNOTATION) == anno(want, REFERENCES_ANNOTATION)
}

/// One write to the mirror namespace.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Create(Box<Secret>),
    /// Replace the copy (pinned to its resourceVersion).
    Replace(Box<Secret>),
    Delete(String),
}

/// What to write so that the copies in the mirror namespace (`copies`: every Secret there
/// with the source label) are those of `wanted` with the content of `sources` (`None`: the
/// source does not exist).
pub fn steps(
    wanted: &BTreeMap<Key, BTreeSet<String>>,
    sources: &BTreeMap<Key, Option<Secret>>,
    copies: &[Secret],
    mirror_namespace: &str,
) -> Vec<Step> {
    let by_name: BTreeMap<String, &Secret> = copies.iter().map(|c| (c.name_any(), c)).collect();
    let mut keep: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for (key, refs) in wanted {
        let Some(Some(source)) = sources.get(key) else {
            continue;
        };
        let mut want = desired_copy(source, mirror_namespace, refs);
        let name = want.name_any();
        keep.insert(name.clone());
        match by_name.get(&name) {
            None => out.push(Step::Create(Box::new(want))),
            Some(copy) if !same(copy, &want) => {
                want.metadata.resource_version = copy.resource_version();
                out.push(Step::Replace(Box::new(want)));
            }
            Some(_) => {}
        }
    }
    for c in copies {
        let name = c.name_any();
        if c.labels().contains_key(SOURCE_UID_LABEL) && !keep.contains(&name) {
            out.push(Step::Delete(name));
        }
    }
    out
}

/// Whether the daemon can find every pull secret `job` names: its copy exists in
/// `mirror_namespace`, or its source does not exist (then there is nothing to wait for;
/// the pull goes without it and reports the missing Secret). A NodeImage written before
/// the copy exists would have the daemon pull without the credentials.
pub async fn copies_ready(
    client: &Client,
    job: &ImagePullJob,
    mirror_namespace: &str,
) -> Result<bool, kube::Error> {
    let ns = job.namespace().unwrap_or_default();
    if ns == mirror_namespace {
        return Ok(true);
    }
    let copies: Api<Secret> = Api::namespaced(client.clone(), mirror_namespace);
    let sources: Api<Secret> = Api::namespaced(client.clone(), &ns);
    for name in job.spec.pull_secrets.iter().filter(|s| !s.is_empty()) {
        if copies.get_opt(&copy_name(&ns, name)).await?.is_some() {
            continue;
        }
        if sources.get_opt(name).await?.is_some() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Keeps the copies of the pull secrets of `jobs` in `mirror_namespace` until `stop`.
pub async fn run(
    client: Client,
    jobs: Store<ImagePullJob>,
    mirror_namespace: String,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let api: Api<Secret> = Api::namespaced(client.clone(), &mirror_namespace);
    let (copies, writer) = reflector::store();
    let wake = Arc::new(tokio::sync::Notify::new());
    {
        let wake = wake.clone();
        let stream = watcher(
            api.clone(),
            watcher::Config::default().labels(SOURCE_UID_LABEL),
        )
        .backoff(crate::watch_backoff::relist())
        .reflect(writer)
        .touched_objects();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while stream.next().await.is_some() {
                wake.notify_one();
            }
        });
    }
    tokio::pin!(stop);
    // The jobs' store has no change stream of its own here: it is read again on every
    // copy change and every few seconds (cheap: the jobs are in memory).
    let mut last_wanted = None;
    let mut last_full: Option<tokio::time::Instant> = None;
    loop {
        let copy_changed = tokio::select! {
            () = &mut stop => return,
            () = wake.notified() => true,
            () = tokio::time::sleep(Duration::from_secs(2)) => false,
        };
        if copies.wait_until_ready().await.is_err() {
            return;
        }
        // The jobs' store is the ImagePullJob controller's, which awaits it too, and a
        // store's readiness wakes one waiter only: this one may lose the wake-up, so it
        // waits for a round at most and asks again in the next.
        match tokio::time::timeout(Duration::from_secs(2), jobs.wait_until_ready()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return,
            Err(_) => continue,
        }
        let state = jobs.state();
        let want = wanted(state.iter().map(|j| j.as_ref()), &mirror_namespace);
        let existing: Vec<Secret> = copies.state().iter().map(|s| s.as_ref().clone()).collect();
        let due = last_full.is_none_or(|t| t.elapsed() >= RESYNC);
        if !due && !copy_changed && last_wanted.as_ref() == Some(&want) {
            continue;
        }
        let mut sources = BTreeMap::new();
        for (ns, name) in want.keys() {
            let got = Api::<Secret>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await;
            match got {
                Ok(s) => {
                    if s.is_none() {
                        tracing::warn!(secret = %format!("{ns}/{name}"), "pull secret named by an ImagePullJob does not exist");
                    }
                    sources.insert((ns.clone(), name.clone()), s);
                }
                // Unknown: neither copied nor deleted this time.
                Err(e) => {
                    tracing::warn!(secret = %format!("{ns}/{name}"), error = %e, "reading pull secret");
                }
            }
        }
        let mut plan = steps(&want, &sources, &existing, &mirror_namespace);
        // A source that could not be read keeps its copy.
        plan.retain(|s| match s {
            Step::Delete(name) => !want.keys().any(|(ns, n)| {
                !sources.contains_key(&(ns.clone(), n.clone())) && copy_name(ns, n) == *name
            }),
            _ => true,
        });
        let mut ok = true;
        for step in plan {
            let r = match &step {
                Step::Create(s) => api.create(&PostParams::default(), s).await.map(|_| ()),
                Step::Replace(s) => api
                    .replace(&s.name_any(), &PostParams::default(), s)
                    .await
                    .map(|_| ()),
                Step::Delete(name) => match api.delete(name, &DeleteParams::default()).await {
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                    r => r.map(|_| ()),
                },
            };
            match r {
                Ok(()) => tracing::info!(
                    action = step_kind(&step),
                    secret = %step_name(&step),
                    namespace = %mirror_namespace,
                    "pull secret copy written"
                ),
                Err(e) => {
                    ok = false;
                    tracing::warn!(secret = %step_name(&step), error = %e, "writing pull secret copy");
                }
            }
        }
        if ok {
            last_wanted = Some(want);
            if due {
                last_full = Some(tokio::time::Instant::now());
            }
        }
    }
}

fn step_kind(s: &Step) -> &'static str {
    match s {
        Step::Create(_) => "create",
        Step::Replace(_) => "replace",
        Step::Delete(_) => "delete",
    }
}

fn step_name(s: &Step) -> String {
    match s {
        Step::Create(x) | Step::Replace(x) => x.name_any(),
        Step::Delete(n) => n.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn job(ns: &str, name: &str, secrets: &[&str]) -> ImagePullJob {
        let mut j = ImagePullJob::new(name, Default::default());
        j.metadata.namespace = Some(ns.into());
        j.spec.pull_secrets = secrets.iter().map(|s| (*s).to_owned()).collect();
        j
    }

    fn source(ns: &str, name: &str, uid: &str, data: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                uid: Some(uid.into()),
                labels: Some(BTreeMap::from([("team".into(), "a".into())])),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/dockerconfigjson".into()),
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".into(),
                ByteString(data.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    fn refs(keys: &[&str]) -> BTreeSet<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    #[test]
    fn copy_names_are_distinct_and_valid() {
        assert_eq!(copy_name("team-a", "regcred"), "team-a.regcred");
        // a namespace has no dot: "a" + "b.c" and "a.b" + "c" cannot both exist
        assert_ne!(copy_name("a", "b-c"), copy_name("a-b", "c"));
        let long = "x".repeat(253);
        let n = copy_name("ns", &long);
        assert!(n.len() <= 253, "{}", n.len());
        assert!(n.starts_with("ns.xxx"));
        assert_ne!(n, copy_name("ns", &"x".repeat(252)));
        assert_eq!(n, copy_name("ns", &long), "stable");
    }

    #[test]
    fn references_point_at_the_copies_once() {
        let r = |ns: &str, n: &str| ReferenceObject {
            namespace: ns.into(),
            name: n.into(),
            mode: None,
        };
        let got = mirror_references(
            &[
                r("team-a", "regcred"),
                r("inplace-system", "team-a.regcred"),
                r("inplace-system", "own"),
                r("team-b", "regcred"),
            ],
            "inplace-system",
        );
        assert_eq!(
            got,
            vec![
                r("inplace-system", "team-a.regcred"),
                r("inplace-system", "own"),
                r("inplace-system", "team-b.regcred"),
            ]
        );
    }

    #[test]
    fn wanted_collects_the_jobs_of_each_secret() {
        let mut deleting = job("team-a", "old", &["other"]);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let jobs = [
            job("team-a", "j1", &["regcred"]),
            job("team-a", "j2", &["regcred", "extra", ""]),
            job("team-b", "j1", &["regcred"]),
            job("inplace-system", "own", &["local"]),
            deleting,
        ];
        let w = wanted(jobs.iter(), "inplace-system");
        let k = |ns: &str, n: &str| (ns.to_owned(), n.to_owned());
        assert_eq!(
            w,
            BTreeMap::from([
                (k("team-a", "extra"), refs(&["team-a/j2"])),
                (k("team-a", "regcred"), refs(&["team-a/j1", "team-a/j2"])),
                (k("team-b", "regcred"), refs(&["team-b/j1"])),
            ])
        );
    }

    #[test]
    fn a_copy_carries_the_content_source_and_references() {
        let c = desired_copy(
            &source("team-a", "regcred", "uid-1", "{}"),
            "inplace-system",
            &refs(&["team-a/j2", "team-a/j1"]),
        );
        assert_eq!(c.name_any(), "team-a.regcred");
        assert_eq!(c.namespace().as_deref(), Some("inplace-system"));
        assert_eq!(
            c.labels().get(SOURCE_UID_LABEL).map(String::as_str),
            Some("uid-1")
        );
        assert!(
            !c.labels().contains_key("team"),
            "the source's own labels stay behind"
        );
        assert_eq!(
            c.annotations()
                .get(SOURCE_KEY_ANNOTATION)
                .map(String::as_str),
            Some("team-a/regcred")
        );
        assert_eq!(
            c.annotations()
                .get(REFERENCES_ANNOTATION)
                .map(String::as_str),
            Some("team-a/j1,team-a/j2")
        );
        assert_eq!(c.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
        assert_eq!(c.data, source("x", "y", "z", "{}").data);
        assert!(c.metadata.owner_references.is_none());
    }

    #[test]
    fn steps_table() {
        let ns = "inplace-system";
        let k = |n: &str, s: &str| (n.to_owned(), s.to_owned());
        let src = source("team-a", "regcred", "uid-1", "v1");
        let one = BTreeMap::from([(k("team-a", "regcred"), refs(&["team-a/j1"]))]);
        let found = BTreeMap::from([(k("team-a", "regcred"), Some(src.clone()))]);
        let mut current = desired_copy(&src, ns, &refs(&["team-a/j1"]));
        current.metadata.resource_version = Some("7".into());
        let mut stray = desired_copy(
            &source("team-b", "gone", "uid-2", "x"),
            ns,
            &refs(&["team-b/j"]),
        );
        stray.metadata.resource_version = Some("3".into());

        // no copy yet: create it
        assert_eq!(
            steps(&one, &found, &[], ns),
            vec![Step::Create(Box::new(desired_copy(
                &src,
                ns,
                &refs(&["team-a/j1"])
            )))]
        );
        // up to date: nothing
        assert_eq!(
            steps(&one, &found, std::slice::from_ref(&current), ns),
            vec![]
        );
        // the source's content changed: replace, pinned to the copy's version
        let rotated = BTreeMap::from([(
            k("team-a", "regcred"),
            Some(source("team-a", "regcred", "uid-1", "v2")),
        )]);
        match &steps(&one, &rotated, std::slice::from_ref(&current), ns)[..] {
            [Step::Replace(s)] => {
                assert_eq!(s.resource_version().as_deref(), Some("7"));
                assert_eq!(s.data, source("a", "b", "c", "v2").data);
            }
            other => panic!("{other:?}"),
        }
        // another job uses it too: the references are rewritten
        let two = BTreeMap::from([(k("team-a", "regcred"), refs(&["team-a/j1", "team-a/j2"]))]);
        match &steps(&two, &found, std::slice::from_ref(&current), ns)[..] {
            [Step::Replace(s)] => assert_eq!(
                s.annotations()
                    .get(REFERENCES_ANNOTATION)
                    .map(String::as_str),
                Some("team-a/j1,team-a/j2")
            ),
            other => panic!("{other:?}"),
        }
        // no job names it any more, or its source is gone: deleted
        assert_eq!(
            steps(
                &BTreeMap::new(),
                &BTreeMap::new(),
                &[current.clone(), stray.clone()],
                ns
            ),
            vec![
                Step::Delete("team-a.regcred".into()),
                Step::Delete("team-b.gone".into())
            ]
        );
        let missing = BTreeMap::from([(k("team-a", "regcred"), None)]);
        assert_eq!(
            steps(&one, &missing, std::slice::from_ref(&current), ns),
            vec![Step::Delete("team-a.regcred".into())]
        );
        // a Secret of the namespace without the source label is never touched
        let mut own = source(ns, "own", "uid-3", "x");
        own.metadata.labels = None;
        assert_eq!(
            steps(&BTreeMap::new(), &BTreeMap::new(), &[own], ns),
            vec![]
        );
    }
}
