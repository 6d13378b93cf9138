use super::*;
use crate::plan::inplace_write::{spec_from_change, still_updatable};
use crate::plan::not_ready::NotReadyMessage;
use crate::plan::{Action, StepWrite};
use inplace_proto::keys;
use k8s_openapi::api::core::v1::{PodCondition, PodReadinessGate, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use std::sync::Arc;

/// The gate conditions to set on a cached pod: the plan's rule over its facts.
fn gate_conditions_to_set(pod: &CachedPod, updating: bool) -> Vec<&'static str> {
    crate::plan::pod_conditions::gate_conditions_of(
        &crate::plan::PodFacts::from_pod(pod, &std::collections::BTreeSet::new()),
        updating,
    )
}

#[allow(clippy::expect_used)]
/// `p` as the watch caches it (the form the act layer reads for every pod).
fn cached(p: &Pod) -> CachedPod {
    CachedPod::from_pod(p).expect("a pod converts to its cached form")
}

fn pod_with(gates: &[&str], conditions: &[&str], annotations: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            annotations: Some(
                annotations
                    .iter()
                    .map(|a| ((*a).to_owned(), "{}".to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            readiness_gates: Some(
                gates
                    .iter()
                    .map(|g| PodReadinessGate {
                        condition_type: (*g).into(),
                    })
                    .collect(),
            ),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            conditions: Some(
                conditions
                    .iter()
                    .map(|c| PodCondition {
                        type_: (*c).into(),
                        status: "False".into(),
                        ..PodCondition::default()
                    })
                    .collect(),
            ),
            ..PodStatus::default()
        }),
    }
}

#[test]
fn new_pods_get_their_gate_conditions() {
    let p = pod_with(&[keys::INPLACE_UPDATE_READY_CONDITION], &[], &[]);
    assert_eq!(
        gate_conditions_to_set(&cached(&p), false),
        vec![keys::INPLACE_UPDATE_READY_CONDITION]
    );
    let p = pod_with(
        &[keys::INPLACE_UPDATE_READY_CONDITION],
        &[keys::INPLACE_UPDATE_READY_CONDITION],
        &[],
    );
    assert!(gate_conditions_to_set(&cached(&p), false).is_empty());
    let p = pod_with(
        &[keys::INPLACE_UPDATE_READY_CONDITION],
        &[],
        &[keys::INPLACE_UPDATE_STATE_ANNOTATION],
    );
    assert!(gate_conditions_to_set(&cached(&p), false).is_empty());
    let p = pod_with(&[], &[], &[]);
    assert!(gate_conditions_to_set(&cached(&p), false).is_empty());
    let p = pod_with(&[keys::KRUISE_POD_READY_CONDITION], &[], &[]);
    assert_eq!(
        gate_conditions_to_set(&cached(&p), false),
        vec![keys::KRUISE_POD_READY_CONDITION]
    );
}

#[test]
fn a_condition_left_false_by_a_failed_update_is_restored() {
    let mut p = pod_with(
        &[keys::INPLACE_UPDATE_READY_CONDITION],
        &[keys::INPLACE_UPDATE_READY_CONDITION],
        &[],
    );
    if let Some(c) = p
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|c| c.first_mut())
    {
        c.reason = Some(keys::START_INPLACE_UPDATE_REASON.into());
    }
    assert_eq!(
        gate_conditions_to_set(&cached(&p), false),
        vec![keys::INPLACE_UPDATE_READY_CONDITION]
    );
    assert!(gate_conditions_to_set(&cached(&p), true).is_empty());
}

/// A step of `action` that writes nothing (for what does not depend on the write).
fn step(action: Action) -> Step {
    Step {
        action,
        write: Ok(StepWrite::Nothing { why: "test" }),
    }
}

fn updatable_pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "uid": "u1", "resourceVersion": "10",
                     "labels": {keys::REVISION_LABEL: "cs-old", keys::LIFECYCLE_STATE_LABEL: "Normal"}},
        "spec": {"containers": [{"name": "app", "image": "app:v1"}]},
        "status": {
            "conditions": [{"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False"},
                           {"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "app", "image": "app:v1", "imageID": "sha-1",
                                   "ready": true, "restartCount": 0}],
        },
    }))
    .unwrap_or_default()
}

#[test]
fn a_conflicting_write_is_retried_only_on_the_same_pod_and_revision() {
    let planned = updatable_pod();
    assert_eq!(planned.uid().as_deref(), Some("u1"));
    type Edit = fn(&mut Pod);
    let cases: Vec<(&str, Edit, bool, bool)> = vec![
        // (what changed, edit, gate_set, retry allowed)
        (
            "nothing but the version",
            |p| p.metadata.resource_version = Some("11".into()),
            true,
            true,
        ),
        (
            "the kubelet's Ready condition",
            |p| {
                if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                    c[1].status = "False".into();
                }
            },
            true,
            true,
        ),
        (
            "the UID (recreated)",
            |p| p.metadata.uid = Some("u2".into()),
            true,
            false,
        ),
        (
            "terminating",
            |p| {
                p.metadata.deletion_timestamp = Some(now_time());
            },
            true,
            false,
        ),
        (
            "the revision",
            |p| {
                p.metadata
                    .labels
                    .get_or_insert_default()
                    .insert(keys::REVISION_LABEL.into(), "cs-new".into());
            },
            true,
            false,
        ),
        (
            "the lifecycle state",
            |p| {
                p.metadata
                    .labels
                    .get_or_insert_default()
                    .insert(keys::LIFECYCLE_STATE_LABEL.into(), "PreparingDelete".into());
            },
            true,
            false,
        ),
        (
            "the image ID",
            |p| {
                if let Some(c) = p
                    .status
                    .as_mut()
                    .and_then(|s| s.container_statuses.as_mut())
                {
                    c[0].image_id = "sha-2".into();
                }
            },
            true,
            false,
        ),
        (
            "the spec image",
            |p| {
                if let Some(s) = p.spec.as_mut() {
                    s.containers[0].image = Some("app:v9".into());
                }
            },
            true,
            false,
        ),
        (
            "the gate turned True",
            |p| {
                if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                    c[0].status = "True".into();
                }
            },
            true,
            false,
        ),
        (
            "the gate True, not required",
            |p| {
                if let Some(c) = p.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                    c[0].status = "True".into();
                }
            },
            false,
            true,
        ),
    ];
    for (what, edit, gate_set, allowed) in cases {
        let mut fresh = planned.clone();
        edit(&mut fresh);
        assert_eq!(
            still_updatable(&planned, &fresh, gate_set).is_ok(),
            allowed,
            "{what}"
        );
    }
}

#[test]
fn spec_from_change_carries_the_restarts() -> Result<(), Error> {
    let mut change = crate::plan::inplace::InPlaceChange::default();
    change.annotations.insert(
        keys::RESTARTED_AT_ANNOTATION.into(),
        Some("2026-01-02T00:00:00Z".into()),
    );
    change.restarts = ["main".to_owned(), "side".to_owned()].into();
    let spec = spec_from_change(&change, "cs-abc", 0)?;
    assert_eq!(spec.restart_containers, ["main", "side"]);
    assert!(spec.container_images.is_empty());
    // The annotation itself goes onto the pod, as with Deployments.
    assert!(spec.meta_data_patch.contains(keys::RESTARTED_AT_ANNOTATION));
    Ok(())
}

#[test]
fn spec_from_change_writes_a_metadata_patch() -> Result<(), Error> {
    let mut change = crate::plan::inplace::InPlaceChange::default();
    change.images.insert("app".into(), "img:v2".into());
    change.labels.insert("a".into(), Some("1".into()));
    change.annotations.insert("b".into(), None);
    let spec = spec_from_change(&change, "cs-abc", 5)?;
    assert_eq!(spec.container_images["app"], "img:v2");
    assert_eq!(spec.grace_seconds, 5);
    let meta: Value =
        serde_json::from_str(&spec.meta_data_patch).map_err(|source| Error::Encode {
            what: "test".into(),
            source,
        })?;
    assert_eq!(
        meta,
        json!({"metadata": {"labels": {"a": "1"}, "annotations": {"b": null}}})
    );
    Ok(())
}

#[test]
fn not_ready_message_uses_reference_json() -> Result<(), serde_json::Error> {
    let m = NotReadyMessage {
        user_agent: "ContainerRecreateRequest".into(),
        key: "preparingDelete".into(),
    };
    assert_eq!(
        serde_json::to_string(&vec![m])?,
        r#"[{"userAgent":"ContainerRecreateRequest","key":"preparingDelete"}]"#
    );
    Ok(())
}

#[test]
fn the_not_ready_key_write_is_pinned_to_the_version_decided_from() {
    let now = Time(Timestamp::UNIX_EPOCH);
    let mut p = pod_with(&[keys::KRUISE_POD_READY_CONDITION], &[], &[]);
    p.metadata.resource_version = Some("7".into());
    let add = conditions::not_ready_key_patch(
        &p,
        keys::PRE_DELETE_HOOK_KEY,
        true,
        Some("9"),
        now.clone(),
    );
    let Some(add) = add else {
        panic!("adding our key to a pod with the gate is a write");
    };
    assert_eq!(add["metadata"], json!({"resourceVersion": "9"}));
    assert_eq!(
        add["status"]["conditions"][0]["type"],
        json!(keys::KRUISE_POD_READY_CONDITION)
    );
    assert_eq!(add["status"]["conditions"][0]["status"], json!("False"));
    assert_eq!(
        add["status"]["conditions"][0]["message"],
        json!(format!(
            r#"[{{"userAgent":"Lifecycle","key":"{}"}}]"#,
            keys::PRE_DELETE_HOOK_KEY
        ))
    );

    // Decided again from a pod that carries our key already: adding is nothing to write,
    // removing empties the list and turns the condition True, pinned to that pod's version.
    let mut with_key = p.clone();
    if let Some(c) = with_key.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        c.push(PodCondition {
            type_: keys::KRUISE_POD_READY_CONDITION.into(),
            status: "False".into(),
            message: add["status"]["conditions"][0]["message"]
                .as_str()
                .map(str::to_owned),
            ..PodCondition::default()
        });
    }
    assert_eq!(
        conditions::not_ready_key_patch(
            &with_key,
            keys::PRE_DELETE_HOOK_KEY,
            true,
            Some("10"),
            now.clone()
        ),
        None
    );
    let remove = conditions::not_ready_key_patch(
        &with_key,
        keys::PRE_DELETE_HOOK_KEY,
        false,
        Some("10"),
        now.clone(),
    );
    assert_eq!(
        remove.as_ref().map(|r| (
            &r["metadata"],
            &r["status"]["conditions"][0]["status"],
            &r["status"]["conditions"][0]["message"]
        )),
        Some((
            &json!({"resourceVersion": "10"}),
            &json!("True"),
            &json!("")
        ))
    );

    // Without the readiness gate nothing is written.
    let no_gate = pod_with(&[], &[], &[]);
    assert_eq!(
        conditions::not_ready_key_patch(&no_gate, keys::PRE_DELETE_HOOK_KEY, true, Some("9"), now),
        None
    );
}

#[test]
fn a_later_write_of_a_pod_is_pinned_to_what_our_earlier_write_left() {
    let mut p = pod_with(&[], &[], &[]);
    p.metadata.name = Some("demo-a".into());
    p.metadata.resource_version = Some("7".into());
    let left = LeftVersions::default();
    // nothing written yet: the cached pod's version
    assert_eq!(
        left.pin_for("demo-a", p.resource_version()),
        Some("7".into())
    );
    // a write of another pod changes nothing (only a pod patch records what it left:
    // `send_pod_patch`)
    left.record("demo-b", "20");
    assert_eq!(
        left.pin_for("demo-a", p.resource_version()),
        Some("7".into())
    );
    // our patch of demo-a left 12, then 15: the next write is pinned to the last
    for rv in ["12", "15"] {
        left.record("demo-a", rv);
    }
    assert_eq!(
        left.pin_for("demo-a", p.resource_version()),
        Some("15".into())
    );
}

/// Serves `app` on a loopback port; a client of it.
async fn serve(
    app: axum::Router,
) -> Result<(kube::Client, tokio::task::JoinHandle<()>), Box<dyn std::error::Error + Send + Sync>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = kube::Client::try_from(kube::Config::new(url.parse()?))?;
    Ok((client, server))
}

/// A loopback API server that answers every request `409 Conflict` without changing
/// anything (what the fault suite's proxy injects), counting the requests.
async fn conflicting_server() -> Result<
    (
        kube::Client,
        Arc<std::sync::atomic::AtomicUsize>,
        tokio::task::JoinHandle<()>,
    ),
    Box<dyn std::error::Error + Send + Sync>,
> {
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    let app = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async {
            (
                axum::http::StatusCode::CONFLICT,
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected","reason":"Conflict","code":409}"#,
            )
        }
    });
    let (client, server) = serve(app).await?;
    Ok((client, seen, server))
}

#[tokio::test]
async fn a_completion_answered_409_is_let_pass_and_counted_for_a_quick_recheck()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use inplace_testkit::pods as fixtures;
    let (ctx, cs, seen, server) = against_conflicting_server().await?;
    // A pod updated in place whose containers run the new spec: its InPlaceUpdateReady
    // condition is set True (a pods/status write pinned to the cached version).
    let mut pod = fixtures::pod("demo-a", "demo-2")
        .in_place_ready(false)
        .build();
    pod.metadata.namespace = Some("default".into());
    pod.metadata.resource_version = Some("7".into());
    if let Some(spec) = pod.spec.as_mut() {
        spec.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: keys::INPLACE_UPDATE_READY_CONDITION.into(),
        }]);
    }
    let owned = Owned {
        pods: vec![Arc::new(cached(&pod))],
        ..Owned::default()
    };
    let write =
        crate::plan::completion_write::of(&cached(&pod), None).ok_or("no completion write")?;
    let plan = Plan {
        steps: vec![Step {
            action: Action::CompleteInPlaceUpdate {
                pod: "demo-a".into(),
            },
            write: Ok(StepWrite::Completion(write)),
        }],
        ..Plan::default()
    };
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        execute(&ctx, &cs, &owned, &plan),
    )
    .await?;
    server.abort();
    assert_eq!(seen.load(Ordering::SeqCst), 1, "one pods/status write");
    // Not a failure (the pod is judged again from its newer version)...
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures.len());
    // ...but counted, so the reconcile is requeued soon even if no watch event comes.
    assert_eq!(outcome.conflicts_passed, 1);
    Ok(())
}

/// A loopback API server that answers every request with `answer`, recording each
/// request's method, path and body.
pub(in crate::runtime) async fn recording_server(
    answer: &'static str,
) -> Result<
    (
        kube::Client,
        Arc<std::sync::Mutex<Vec<(String, String, serde_json::Value)>>>,
        tokio::task::JoinHandle<()>,
    ),
    Box<dyn std::error::Error + Send + Sync>,
> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method, uri: axum::http::Uri, body: String| {
            let recorder = recorder.clone();
            async move {
                let body = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
                if let Ok(mut seen) = recorder.lock() {
                    seen.push((method.to_string(), uri.path().to_owned(), body));
                }
                (
                    axum::http::StatusCode::OK,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    answer,
                )
            }
        },
    );
    let (client, server) = serve(app).await?;
    Ok((client, seen, server))
}

/// A context whose client reaches a [`conflicting_server`], and a CloneSet `demo` in
/// `default`: what the tests of conflicting writes start from.
async fn against_conflicting_server() -> Result<
    (
        Context,
        CloneSet,
        Arc<std::sync::atomic::AtomicUsize>,
        tokio::task::JoinHandle<()>,
    ),
    Box<dyn std::error::Error + Send + Sync>,
> {
    let (client, seen, server) = conflicting_server().await?;
    let cs = inplace_testkit::pods::cloneset(json!({}));
    Ok((test_context(client), cs, seen, server))
}

pub(in crate::runtime) fn test_context(client: kube::Client) -> Context {
    let (clonesets, _) = kube::runtime::reflector::store();
    let (pods, _) = kube::runtime::reflector::store();
    let (pvcs, _) = kube::runtime::reflector::store();
    let (revisions, _) = kube::runtime::reflector::store();
    let (nodes, _) = kube::runtime::reflector::store();
    Context {
        client,
        stores: crate::watch::Stores {
            clonesets,
            pods,
            pvcs,
            revisions,
            nodes,
        },
        expectations: crate::expectations::Expectations::new(std::time::Duration::from_secs(60)),
        events: crate::events::EventSink::disabled(),
        metrics: Arc::new(crate::metrics::Metrics::new()),
        health: Arc::default(),
        caps: crate::discovery::ServerCapabilities::default(),
        settings: crate::runtime::Settings::default(),
        predownload: None,
        failures: std::sync::Mutex::default(),
        pods_to_delete_seen: std::sync::Mutex::default(),
        status_writes: crate::runtime::last_write::LastWrites::default(),
        synced: tokio::sync::watch::channel(true).1,
        turns: Arc::new(crate::turns::Turns::new(3)),
    }
}

#[tokio::test]
async fn the_applier_sends_the_write_the_step_holds_and_nothing_for_a_write_not_planned()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use crate::plan::action_write::{ActionInputs, Write};
    use crate::plan::inplace_write::WriteInputs;
    use crate::plan::{PlanOptions, WriteError};
    use inplace_testkit::pods as fixtures;
    let (client, seen, server) = recording_server(
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"demo-a","namespace":"default","uid":"uid-demo-a","resourceVersion":"9"}}"#,
    )
    .await?;
    let ctx = test_context(client);
    let cs = fixtures::cloneset(json!({}));
    let mut pod = fixtures::pod("demo-a", "demo-2").build();
    pod.metadata.namespace = Some("default".into());
    let owned = Owned {
        pods: vec![Arc::new(cached(&pod))],
        ..Owned::default()
    };
    let action = Action::SetTemplateHash {
        pod: "demo-a".into(),
        hash: "from-action".into(),
    };
    let options = PlanOptions::default();
    let mut steps = crate::plan::step::plan_steps(
        &WriteInputs {
            cloneset: &cs,
            revisions: &[],
            update_revision: "demo-2",
            options: &options,
            now: Timestamp::now(),
        },
        &ActionInputs {
            cloneset: &cs,
            pods: &owned.pods,
            pvcs: &[],
            revisions: &[],
            update_revision: "demo-2",
            short_hash: false,
        },
        &owned
            .pods
            .iter()
            .map(|p| crate::plan::PodFacts::from_pod(p, &Default::default()))
            .collect::<Vec<_>>(),
        vec![action.clone()],
    );
    // The step's write, changed after planning: what is sent is the step's, not one
    // derived again from the action.
    if let Some(Ok(StepWrite::Object(Write::Patch(p)))) = steps.first_mut().map(|s| &mut s.write) {
        p.patch = json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH_LABEL: "from-plan"}}});
    }
    let plan = Plan {
        steps,
        ..Plan::default()
    };
    let outcome = execute(&ctx, &cs, &owned, &plan).await;
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    // A step whose write could not be planned sends nothing and fails with its error.
    let unplanned = Plan {
        steps: vec![Step {
            action,
            write: Err(WriteError::NotCached("pod default/demo-a".into())),
        }],
        ..Plan::default()
    };
    let outcome = execute(&ctx, &cs, &owned, &unplanned).await;
    server.abort();
    assert!(
        matches!(
            outcome.failures.as_slice(),
            [Failure {
                kind: FailureKind::Update,
                error: Error::NotCached(_)
            }]
        ),
        "{:?}",
        outcome.failures
    );
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let label = |hash: &str| json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH_LABEL: hash}}});
    assert_eq!(
        seen,
        vec![(
            "PATCH".to_owned(),
            "/api/v1/namespaces/default/pods/demo-a".to_owned(),
            label("from-plan")
        ),]
    );
    Ok(())
}

/// A phase builds the futures of all its actions (1,000 pods: 1,000 futures) before
/// `bounded` starts 16 of them: a future not yet started must hold its arguments only, not
/// the state of the API calls it will make (inlined, ~4 MiB per reconcile of a 1,000-pod
/// phase while creating 10,000 pods).
#[tokio::test]
async fn an_action_not_yet_started_is_small() -> Result<(), Box<dyn std::error::Error + Send + Sync>>
{
    use inplace_testkit::pods as fixtures;
    use std::mem::size_of_val;
    // never contacted: no future is polled
    let client = kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse()?))?;
    let ctx = test_context(client);
    let cs = fixtures::cloneset(json!({}));
    let owned = Owned::default();
    let plan = Plan {
        steps: vec![step(Action::Create {
            revision: "demo-1".into(),
            instance_id: "a".into(),
        })],
        ..Plan::default()
    };
    let actor = Actor::new(&ctx, &cs, &owned, &plan);
    let action = &plan.steps[0];
    let conditions = crate::plan::pod_conditions::InitialConditions {
        pod: "demo-a".into(),
        resource_version: "7".into(),
        conditions: vec![keys::INPLACE_UPDATE_READY_CONDITION],
    };
    let now = now_time();
    let inlined = size_of_val(&actor.act(action));
    let small = 256;
    // what boxing saves: the inlined action is several times larger than the bound
    assert!(inlined > 4 * small, "act's own future is {inlined} bytes");
    for (what, size) in [
        ("act_chain", size_of_val(&actor.act_chain(vec![action]))),
        (
            "init_pod_condition",
            size_of_val(&actor.init_pod_condition(&conditions, &now)),
        ),
    ] {
        assert!(
            size <= small,
            "{what}: {size} bytes not yet started (act: {inlined})"
        );
    }
    Ok(())
}

/// The finalizer step is sent as the plan holds it: one merge patch of the CloneSet with
/// the whole finalizer list and the version decided from.
#[tokio::test]
async fn the_finalizer_step_is_sent_with_its_list_and_precondition()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use inplace_testkit::pods as fixtures;
    let mut cs = fixtures::cloneset(json!({}));
    cs.metadata.resource_version = Some("41".into());
    cs.metadata.labels = Some(
        [(
            keys::DELETE_PROTECTION_LABEL.to_owned(),
            "Always".to_owned(),
        )]
        .into(),
    );
    let answer: &'static str = Box::leak(serde_json::to_string(&cs)?.into_boxed_str());
    let (client, seen, server) = recording_server(answer).await?;
    let ctx = test_context(client);
    let step = crate::plan::protection::planned(&cs, true).ok_or("a finalizer step")?;
    let plan = Plan {
        steps: vec![step],
        ..Plan::default()
    };
    let outcome = execute(&ctx, &cs, &Owned::default(), &plan).await;
    server.abort();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        vec![(
            "PATCH".to_owned(),
            "/apis/apps.kruise.io/v1alpha1/namespaces/default/clonesets/demo".to_owned(),
            json!({"metadata": {
                "finalizers": [keys::DELETE_PROTECTION_LABEL],
                "resourceVersion": "41",
            }}),
        )]
    );
    Ok(())
}

/// Claims are sent one after the other and the first failure ends them (the rest is not
/// attempted), with the error naming the claim, as the runtime's loop did before they were
/// plan steps.
#[tokio::test]
async fn claims_are_sent_one_by_one_and_stop_at_the_first_failure()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (ctx, cs, seen, server) = against_conflicting_server().await?;
    let orphan = |name: &str| -> Result<Pod, serde_json::Error> {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
            "uid": format!("uid-{name}"), "labels": {"app": "demo"}}}))
    };
    let steps = crate::plan::claim::steps(&cs, &[orphan("demo-a")?, orphan("demo-b")?]);
    assert_eq!(steps.len(), 2);
    let plan = Plan {
        steps,
        ..Plan::default()
    };
    let outcome = execute(&ctx, &cs, &Owned::default(), &plan).await;
    server.abort();
    assert_eq!(seen.load(Ordering::SeqCst), 1, "one patch, then nothing");
    assert_eq!((outcome.attempted, outcome.skipped), (1, 1));
    assert!(
        matches!(
            outcome.failures.as_slice(),
            [Failure { error: Error::Kube { action, .. }, .. }] if action == "adopt pod demo-a"
        ),
        "{:?}",
        outcome.failures
    );
    Ok(())
}

/// A pod `demo-a` as the server answers a write of it.
const POD_WRITTEN: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"demo-a","namespace":"default","uid":"uid-demo-a","resourceVersion":"9"}}"#;

/// Requests a recording server saw: method, path, body.
type Seen = Vec<(String, String, Value)>;

/// Sends `steps` alone ([`execute`]) for a CloneSet `demo` with `pods` cached, to a
/// recording server that answers `answer`; the context, the outcome and the requests seen.
async fn send_alone(
    steps: Vec<Step>,
    pods: &[Pod],
    answer: &'static str,
) -> Result<(Context, Outcome, Seen), Box<dyn std::error::Error + Send + Sync>> {
    let (client, seen, server) = recording_server(answer).await?;
    let ctx = test_context(client);
    let cs = inplace_testkit::pods::cloneset(json!({}));
    let owned = Owned {
        pods: pods.iter().map(|p| Arc::new(cached(p))).collect(),
        ..Owned::default()
    };
    let plan = Plan {
        steps,
        ..Plan::default()
    };
    let outcome = execute(&ctx, &cs, &owned, &plan).await;
    server.abort();
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    Ok((ctx, outcome, seen))
}

/// An in-place write with a resize through the subresource: the pod patch pinned to the
/// planned version, then the strategic merge patch of `pods/<name>/resize`, each expected.
#[tokio::test]
async fn an_in_place_write_then_its_resize_go_to_the_pod_and_its_resize_subresource()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use crate::plan::inplace_write::{InPlaceWrite, InPlaceWriteKind, Resize, ResizeVia};
    use k8s_openapi::api::core::v1::ResourceRequirements;
    let limits = ResourceRequirements {
        limits: Some([("cpu".to_owned(), Quantity("2".into()))].into()),
        ..ResourceRequirements::default()
    };
    let write = InPlaceWrite {
        action: 0,
        kind: InPlaceWriteKind::NextBatch,
        pod: "demo-a".into(),
        resource_version: "7".into(),
        revision: "demo-2".into(),
        not_ready_first: false,
        patch: json!({"metadata": {"labels": {"x": "y"}}}).into(),
        resize: Some(Resize {
            via: ResizeVia::Subresource,
            containers: [("main".to_owned(), limits)].into(),
        }),
        guard: crate::plan::inplace_write::Guard::default(),
    };
    let step = Step {
        action: Action::ApplyNextContainerBatch {
            pod: "demo-a".into(),
        },
        write: Ok(StepWrite::InPlace(write)),
    };
    let (_, outcome, seen) = send_alone(vec![step], &[], POD_WRITTEN).await?;
    assert!(outcome.failures.is_empty(), "{outcome:?}");
    let sent: Vec<(&str, &str, &Value)> = seen
        .iter()
        .map(|(m, p, b)| (m.as_str(), p.as_str(), b))
        .collect();
    assert_eq!(
        sent,
        [
            (
                "PATCH",
                "/api/v1/namespaces/default/pods/demo-a",
                &json!({"metadata": {"labels": {"x": "y"}, "resourceVersion": "7"}})
            ),
            (
                "PATCH",
                "/api/v1/namespaces/default/pods/demo-a/resize",
                &json!({"spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "2"}}}]}})
            ),
        ]
    );
    Ok(())
}

/// A pod patch records the version the server answered: the next write of the same pod
/// in the execution (our key in `KruisePodReady`) is pinned to it, not to the cached one.
#[tokio::test]
async fn the_version_a_pod_patch_left_pins_the_next_write_of_the_pod()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use crate::plan::lifecycle_write::{LifecycleWrite, NotReadyKey};
    use inplace_proto::LifecycleState;
    let mut pod = pod_with(&[keys::KRUISE_POD_READY_CONDITION], &[], &[]);
    pod.metadata.name = Some("demo-a".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.resource_version = Some("7".into());
    let lifecycle = |not_ready: Option<NotReadyKey>, labels: &[(&str, &str)]| Step {
        action: Action::Lifecycle {
            pod: "demo-a".into(),
            from: Some(LifecycleState::Normal),
            to: LifecycleState::PreparingUpdate,
            mark_not_ready: not_ready.map(|k| k.add),
        },
        write: Ok(StepWrite::Lifecycle(LifecycleWrite {
            pod: "demo-a".into(),
            not_ready,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            finalizers: Vec::new(),
            with_completion: false,
        })),
    };
    let key = NotReadyKey {
        key: keys::PRE_DELETE_HOOK_KEY,
        add: true,
    };
    let steps = vec![lifecycle(None, &[("x", "y")]), lifecycle(Some(key), &[])];
    let (_, outcome, seen) = send_alone(steps, &[pod], POD_WRITTEN).await?;
    assert!(outcome.failures.is_empty(), "{outcome:?}");
    let sent: Vec<(&str, &Value)> = seen
        .iter()
        .map(|(_, p, b)| (p.as_str(), &b["metadata"]["resourceVersion"]))
        .collect();
    assert_eq!(
        sent,
        [
            ("/api/v1/namespaces/default/pods/demo-a", &Value::Null),
            ("/api/v1/namespaces/default/pods/demo-a/status", &json!("9")),
        ]
    );
    Ok(())
}

/// A pod delete carries its UID as precondition, and the PVCs that go with it follow,
/// each only of its own UID; every delete is expected.
#[tokio::test]
async fn a_pod_delete_and_its_pvcs_carry_their_uids()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use crate::plan::action_write::{PvcDelete, Write};
    use crate::plan::model::DeleteReason;
    let mut pod = inplace_testkit::pods::pod("demo-a", "demo-1").build();
    pod.metadata.namespace = Some("default".into());
    let step = Step {
        action: Action::Delete {
            pod: "demo-a".into(),
            reason: DeleteReason::ScaleDown,
        },
        write: Ok(StepWrite::Object(Write::DeletePod {
            pod: "demo-a".into(),
            uid: "uid-demo-a".into(),
            pvcs: vec![PvcDelete {
                pvc: "data-demo-a".into(),
                uid: "uid-data".into(),
            }],
        })),
    };
    let success = r#"{"kind":"Status","status":"Success"}"#;
    let (ctx, outcome, seen) = send_alone(vec![step], &[pod], success).await?;
    assert!(outcome.failures.is_empty(), "{outcome:?}");
    let sent: Vec<(&str, &str, &Value)> = seen
        .iter()
        .map(|(m, p, b)| (m.as_str(), p.as_str(), &b["preconditions"]))
        .collect();
    assert_eq!(
        sent,
        [
            (
                "DELETE",
                "/api/v1/namespaces/default/pods/demo-a",
                &json!({"uid": "uid-demo-a"})
            ),
            (
                "DELETE",
                "/api/v1/namespaces/default/persistentvolumeclaims/data-demo-a",
                &json!({"uid": "uid-data"})
            ),
        ]
    );
    assert_eq!(ctx.expectations.len(), 1, "the CloneSet has expectations");
    Ok(())
}

/// Our key in `KruisePodReady` answered 409: the pod is read again and the change decided
/// again from it, pinned to the version read, once; a second 409 fails the step.
#[tokio::test]
async fn our_not_ready_key_is_decided_again_once_from_the_pod_read_after_a_conflict()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use crate::plan::lifecycle_write::{LifecycleWrite, NotReadyKey};
    use inplace_proto::LifecycleState;
    let mut pod = pod_with(&[], &[], &[]);
    pod.metadata.name = Some("demo-a".into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.resource_version = Some("7".into());
    if let Some(spec) = pod.spec.as_mut() {
        spec.readiness_gates = Some(vec![PodReadinessGate {
            condition_type: keys::KRUISE_POD_READY_CONDITION.into(),
        }]);
    }
    let mut fresh = serde_json::to_value(&pod)?;
    fresh["metadata"]["resourceVersion"] = json!("8");
    let fresh = fresh.to_string();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: axum::http::Method, uri: axum::http::Uri, body: String| {
            let (recorder, fresh) = (recorder.clone(), fresh.clone());
            async move {
                let body = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
                let rv = body["metadata"]["resourceVersion"].clone();
                if let Ok(mut seen) = recorder.lock() {
                    seen.push((method.to_string(), uri.path().to_owned(), rv));
                }
                let (status, answer) = if method == axum::http::Method::GET {
                    (axum::http::StatusCode::OK, fresh)
                } else {
                    (
                        axum::http::StatusCode::CONFLICT,
                        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected","reason":"Conflict","code":409}"#.to_owned(),
                    )
                };
                (
                    status,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    answer,
                )
            }
        },
    );
    let (client, server) = serve(app).await?;
    let ctx = test_context(client);
    let cs = inplace_testkit::pods::cloneset(json!({}));
    let owned = Owned {
        pods: vec![Arc::new(cached(&pod))],
        ..Owned::default()
    };
    let write = LifecycleWrite {
        pod: "demo-a".into(),
        not_ready: Some(NotReadyKey {
            key: keys::PRE_DELETE_HOOK_KEY,
            add: true,
        }),
        labels: Default::default(),
        finalizers: Vec::new(),
        with_completion: false,
    };
    let plan = Plan {
        steps: vec![Step {
            action: Action::Lifecycle {
                pod: "demo-a".into(),
                from: Some(LifecycleState::Normal),
                to: LifecycleState::PreparingDelete,
                mark_not_ready: Some(true),
            },
            write: Ok(StepWrite::Lifecycle(write)),
        }],
        ..Plan::default()
    };
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        execute(&ctx, &cs, &owned, &plan),
    )
    .await?;
    server.abort();
    let status = "/api/v1/namespaces/default/pods/demo-a/status";
    let seen = seen.lock().map_err(|_| "poisoned")?.clone();
    assert_eq!(
        seen,
        vec![
            ("PATCH".to_owned(), status.to_owned(), json!("7")),
            (
                "GET".to_owned(),
                "/api/v1/namespaces/default/pods/demo-a".to_owned(),
                serde_json::Value::Null
            ),
            ("PATCH".to_owned(), status.to_owned(), json!("8")),
        ]
    );
    assert!(
        matches!(outcome.failures.as_slice(), [f] if f.error.is_conflict()),
        "{outcome:?}"
    );
    assert_eq!(outcome.conflicts_passed, 0);
    Ok(())
}

/// Pre-download's steps as the plan holds them: the ImagePullJob created, then the
/// revision labelled; a failed create ends them before the label and is set aside, so
/// the reconcile does not fail.
#[tokio::test]
async fn pre_download_steps_are_sent_in_order_and_a_failure_is_set_aside()
-> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use crate::plan::predownload::Decision;
    use inplace_proto::imagepulljob::ImagePullJob;
    let job: ImagePullJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "ImagePullJob",
        "metadata": {"name": "demo-2-main", "namespace": "default"},
        "spec": {"image": "nginx:2"},
    }))?;
    let decision = Decision::Create {
        revision: "demo-2".into(),
        jobs: vec![job],
    };
    let plan = Plan {
        steps: crate::plan::predownload_steps::of_decision(decision, &[]),
        ..Plan::default()
    };
    let cs = inplace_testkit::pods::cloneset(json!({}));
    let answer = r#"{"apiVersion":"apps.kruise.io/v1beta1","kind":"ImagePullJob","metadata":{"name":"demo-2-main"},"spec":{"image":"nginx:2"}}"#;
    let (client, seen, server) = recording_server(answer).await?;
    let outcome = execute(&test_context(client), &cs, &Owned::default(), &plan).await;
    server.abort();
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert!(outcome.set_aside.is_empty(), "{:?}", outcome.set_aside);
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let sent: Vec<(&str, &str)> = seen
        .iter()
        .map(|(m, p, _)| (m.as_str(), p.as_str()))
        .collect();
    assert_eq!(
        sent,
        vec![
            (
                "POST",
                "/apis/apps.kruise.io/v1beta1/namespaces/default/imagepulljobs"
            ),
            (
                "PATCH",
                "/apis/apps/v1/namespaces/default/controllerrevisions/demo-2"
            ),
        ]
    );
    assert_eq!(seen[0].2["spec"]["image"], "nginx:2");
    assert_eq!(
        seen[1].2,
        json!({"metadata": {"labels": {keys::PRE_PREDOWNLOAD_CREATED_LABEL: "true"}}})
    );

    // Refused: the label is not sent, the reconcile does not fail.
    let (ctx, cs, seen, server) = against_conflicting_server().await?;
    let outcome = execute(&ctx, &cs, &Owned::default(), &plan).await;
    server.abort();
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
    assert_eq!(outcome.set_aside.len(), 1);
    assert_eq!((outcome.attempted, outcome.skipped), (1, 1));
    assert!(outcome.into_error().is_none());
    Ok(())
}
