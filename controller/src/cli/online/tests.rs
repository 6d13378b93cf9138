#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use inplace_proto::{CloneSetCondition, ImagePullJobStatus};

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

#[test]
fn get_scope_refuses_a_name_with_all_namespaces_or_a_selector_like_kubectl() {
    assert_eq!(
        scope(Some("web"), false, None).unwrap(),
        Scope::Named("web".into())
    );
    assert_eq!(
        scope(None, true, Some("app=web")).unwrap(),
        Scope::List {
            all_namespaces: true,
            selector: Some("app=web".into())
        }
    );
    let err = |r: Result<Scope, OnlineError>| r.unwrap_err().to_string();
    assert_eq!(
        err(scope(Some("web"), true, None)),
        "a resource cannot be retrieved by name across all namespaces"
    );
    assert_eq!(
        err(scope(Some("web"), false, Some("app=web"))),
        "name cannot be provided when a selector is specified"
    );
    assert_eq!(scope(Some("web"), true, None).unwrap_err().exit_code(), 2);
}

#[test]
fn a_target_is_a_name_or_a_selector_like_kubectl() {
    use super::select::NAME_AND_SELECTOR;
    assert_eq!(
        target(Some("web"), None).unwrap(),
        Target::Named("web".into())
    );
    assert_eq!(
        target(None, Some("app=web")).unwrap(),
        Target::Selected("app=web".into())
    );
    let both = target(Some("web"), Some("app=web")).unwrap_err();
    assert_eq!(both.to_string(), NAME_AND_SELECTOR);
    assert_eq!(both.exit_code(), 2);
    let neither = target(None, None).unwrap_err();
    assert!(
        neither
            .to_string()
            .starts_with("required resource not specified"),
        "{neither}"
    );
    assert_eq!(neither.exit_code(), 2);
}

#[test]
fn set_image_words_are_a_name_then_images_or_with_a_selector_only_images() {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        image_target(&words(&["cloneset/web", "app=img:2", "side=s:1"]), None).unwrap(),
        (
            Target::Named("web".into()),
            words(&["app=img:2", "side=s:1"])
        )
    );
    assert_eq!(
        image_target(&words(&["app=img:2"]), Some("tier=front")).unwrap(),
        (Target::Selected("tier=front".into()), words(&["app=img:2"]))
    );
    let text = |r: Result<(Target, Vec<String>), OnlineError>| r.unwrap_err().to_string();
    assert_eq!(
        text(image_target(
            &words(&["web", "app=img:2"]),
            Some("tier=front")
        )),
        super::select::NAME_AND_SELECTOR
    );
    assert!(text(image_target(&words(&["app=img:2"]), None)).contains("required resource"));
    assert!(text(image_target(&words(&["web"]), None)).contains("at least one image"));
    assert!(text(image_target(&words(&[]), Some("a=b"))).contains("at least one image"));
    assert!(
        text(image_target(&words(&["deployment/web", "app=i"]), None)).contains("not a CloneSet")
    );
}

#[test]
fn selected_names_are_sorted_and_nothing_found_is_said_like_kubectl() {
    let named = |n: &str| {
        cs(&format!(
            "metadata: {{name: {n}}}\nspec: {{selector: {{}}, template: {{}}}}"
        ))
    };
    assert_eq!(
        super::select::sorted_names(&[named("web-b"), named("api"), named("web-a")]),
        ["api", "web-a", "web-b"]
    );
    assert_eq!(
        super::select::no_resources_line("dev"),
        "No resources found in dev namespace.\n"
    );
}

/// Runs [`super::select::over`] on `names` with a command that prints `<name>\n` (YAML
/// when asked) and fails for the names in `failing`; returns (result, stdout, stderr).
fn over(
    names: &[&str],
    manner: super::select::Manner,
    output: Option<DataFormat>,
    failing: &[&str],
) -> (Result<(), OnlineError>, String, String) {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let result = runtime.block_on(super::select::over(
        &names,
        "dev",
        manner,
        output,
        &mut out,
        &mut err,
        async |name: &str, out: &mut dyn Write| {
            if failing.contains(&name) {
                return Err(OnlineError::Failed(format!("{name} failed")));
            }
            writeln!(out, "name: {name}")?;
            Ok(())
        },
    ));
    (
        result,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn over_several_cloneset_runs_each_in_turn_like_kubectl() {
    use super::select::Manner;
    // Nothing matched: status, pause, resume, restart say so; history, undo, set image don't.
    let (r, out, err) = over(&[], Manner::STATUS, None, &[]);
    assert!(r.is_ok());
    assert_eq!(
        (out.as_str(), err.as_str()),
        ("", "No resources found in dev namespace.\n")
    );
    let (r, out, err) = over(&[], Manner::QUIET, None, &[]);
    assert!(r.is_ok());
    assert_eq!((out.as_str(), err.as_str()), ("", ""));
    // YAML documents are separated, JSON objects follow each other.
    let (r, out, _) = over(&["a", "b"], Manner::PATCH, Some(DataFormat::Yaml), &[]);
    assert!(r.is_ok());
    assert_eq!(out, "name: a\n---\nname: b\n");
    let (_, out, _) = over(&["a", "b"], Manner::PATCH, Some(DataFormat::Json), &[]);
    assert_eq!(out, "name: a\nname: b\n");
    // An edit goes on after a failure, which is printed; the exit code is the failure's.
    let (r, out, err) = over(&["a", "b", "c"], Manner::PATCH, None, &["a"]);
    assert_eq!(out, "name: b\nname: c\n");
    assert_eq!(err, "error: a failed\n");
    assert_eq!(r.unwrap_err().exit_code(), EXIT_FAILED);
    // A status stops at the first failed rollout.
    let (r, out, err) = over(&["a", "b", "c"], Manner::STATUS, None, &["b"]);
    assert_eq!(out, "name: a\n");
    assert_eq!(err, "error: b failed\n");
    assert_eq!(r.unwrap_err().exit_code(), EXIT_FAILED);
    // One name: the error is returned, not printed here (the caller prints it once).
    let (r, _, err) = over(&["a"], Manner::PATCH, None, &["a"]);
    assert_eq!(err, "");
    assert_eq!(r.unwrap_err().to_string(), "a failed");
}
