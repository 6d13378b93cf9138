#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::json;

use super::*;

const CS: &str = "apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata: {name: demo, namespace: default, uid: u1}
spec:
  replicas: 3
  selector: {matchLabels: {app: demo}}
  template:
    metadata: {labels: {app: demo}}
    spec: {containers: [{name: main, image: 'nginx:1'}]}
";

const PODS: &str = "apiVersion: v1
kind: List
items:
- metadata:
    name: demo-aaaaa
    labels: {app: demo, controller-revision-hash: demo-old, apps.kruise.io/cloneset-instance-id: aaaaa}
  spec: {nodeName: n1, containers: [{name: main, image: 'nginx:1'}]}
  status:
    phase: Running
    conditions: [{type: Ready, status: 'True', lastTransitionTime: '2026-01-01T00:00:00Z'}]
";

fn src<'a>(name: &'a str, text: &'a str) -> Source<'a> {
    Source { name, text }
}

#[test]
fn pod_not_matching_the_selector_is_bad_input_naming_the_pods_file() {
    let pods = PODS.replace("app: demo,", "app: other,");
    let e = load(
        src("cs.yaml", CS),
        Some(src("pods.yaml", &pods)),
        None,
        None,
    )
    .unwrap_err();
    let line = e.to_string();
    assert!(
        line.starts_with("pods.yaml: pod demo-aaaaa: metadata.labels:"),
        "{line}"
    );
    assert!(line.contains("app=demo"));
}

#[test]
fn status_current_revision_is_taken_without_a_revision_list() {
    let cs = format!("{CS}status: {{currentRevision: demo-old}}\n");
    let inputs = load(
        src("cs.yaml", &cs),
        Some(src("pods.yaml", PODS)),
        None,
        None,
    )
    .unwrap();
    let report = compute(
        &inputs,
        &Settings::default(),
        "2026-01-02T00:00:00Z".parse().unwrap(),
        "cs.yaml",
    )
    .unwrap();
    assert_eq!(report.plan.revisions.current_revision, "demo-old");
    assert_eq!(report.plan.diffs.scale_up, 2);
}

#[test]
fn yaml_output_is_the_json_output() {
    let inputs = load(src("cs.yaml", CS), Some(src("pods.yaml", PODS)), None, None).unwrap();
    let now = "2026-01-02T00:00:00Z".parse().unwrap();
    let report = compute(&inputs, &Settings::default(), now, "cs.yaml").unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&render(&report, &inputs, Format::Json)).unwrap();
    let yaml: serde_json::Value =
        serde_saphyr::from_str(&render(&report, &inputs, Format::Yaml)).unwrap();
    assert_eq!(json, yaml);
}

/// `plan NAME` keeps what the controller's caches select: pods it controls that match
/// its selector, its revisions, its PVCs and the unowned ones matching its selector.
#[test]
fn live_inputs_select_what_the_controller_plans_from() {
    let cs = input::cloneset(Source {
        name: "cs",
        text: CS,
    })
    .unwrap();
    let owner = |uid: &str, kind: &str| {
        json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": kind, "name": "x",
                    "uid": uid, "controller": true}])
    };
    let obj = |name: &str, labels: serde_json::Value, owners: serde_json::Value| json!({"metadata": {"name": name, "labels": labels, "ownerReferences": owners}});
    let pods: Vec<Pod> = vec![
        obj("p-b", json!({"app": "demo"}), owner("u1", "CloneSet")),
        obj("p-a", json!({"app": "demo"}), owner("u1", "CloneSet")),
        obj(
            "p-released",
            json!({"app": "other"}),
            owner("u1", "CloneSet"),
        ),
        obj("p-orphan", json!({"app": "demo"}), json!([])),
        obj("p-foreign", json!({"app": "demo"}), owner("u2", "CloneSet")),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let pvcs: Vec<PersistentVolumeClaim> = vec![
        obj("c-own", json!({}), owner("u1", "CloneSet")),
        obj("c-orphan", json!({"app": "demo"}), json!([])),
        obj("c-foreign", json!({"app": "demo"}), owner("u2", "CloneSet")),
        obj("c-unmatched", json!({"app": "x"}), json!([])),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect();
    let revisions: Vec<ControllerRevision> = vec![
            json!({"metadata": {"name": "r-own", "ownerReferences": owner("u1", "CloneSet")}, "revision": 1}),
            json!({"metadata": {"name": "r-foreign", "ownerReferences": owner("u2", "CloneSet")}, "revision": 1}),
        ]
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect();
    let inputs = live_inputs(cs, pods, pvcs, revisions).unwrap();
    let names = |m: Vec<Option<String>>| -> Vec<String> { m.into_iter().flatten().collect() };
    assert_eq!(
        names(
            inputs
                .pods
                .iter()
                .map(|p| p.metadata.name.clone())
                .collect()
        ),
        ["p-a", "p-b"]
    );
    assert_eq!(
        names(
            inputs
                .pvcs
                .iter()
                .map(|p| p.metadata.name.clone())
                .collect()
        ),
        ["c-orphan", "c-own"]
    );
    assert_eq!(
        names(
            inputs
                .revisions
                .iter()
                .map(|r| r.metadata.name.clone())
                .collect()
        ),
        ["r-own"]
    );
}

#[test]
fn plan_takes_files_or_a_name_not_both_nor_neither() {
    let run_args = |args: &[&str]| {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(
            std::iter::once("kubectl-inplace").chain(args.iter().copied()),
            &mut out,
            &mut err,
        );
        (code, String::from_utf8_lossy(&err).into_owned())
    };
    let (code, err) = run_args(&["plan"]);
    assert_eq!(code, EXIT_BAD_INPUT, "{err}");
    assert!(err.contains("--filename"), "{err}");
    let (code, err) = run_args(&["plan", "demo", "-f", "cs.yaml"]);
    assert_eq!(code, EXIT_BAD_INPUT, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, err) = run_args(&["plan", "deployment/demo"]);
    assert_eq!(code, EXIT_BAD_INPUT, "{err}");
    assert!(err.contains("is not a CloneSet"), "{err}");
}

#[test]
fn completion_scripts_name_every_command() {
    for shell in [CompletionShell::Bash, CompletionShell::Zsh] {
        let script = completion(shell);
        for word in [
            "plan",
            "rollout",
            "history",
            "undo",
            "restart",
            "set",
            "scale-down",
            "warm-up",
            "get",
        ] {
            assert!(script.contains(word), "{shell:?} lacks {word}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Truncated inputs (any prefix of the CloneSet and of the pods) never panic the
    /// whole pipeline: they parse and plan, or fail with one line.
    #[test]
    fn truncated_inputs_never_panic_the_plan_command(
        cut_cs in 0usize..=CS.len(),
        cut_pods in 0usize..=PODS.len(),
    ) {
        let now: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let result = load(
            src("cs.yaml", &CS[..cut_cs]),
            Some(src("pods.yaml", &PODS[..cut_pods])),
            None,
            None,
        )
        .and_then(|inputs| {
            let report = compute(&inputs, &Settings::default(), now, "cs.yaml")?;
            let _ = render(&report, &inputs, Format::Table);
            let _ = render(&report, &inputs, Format::Json);
            Ok(())
        });
        if let Err(e) = result {
            prop_assert!(!e.to_string().contains('\n'));
        }
    }
}

#[test]
fn a_lifecycle_action_shows_what_it_writes() {
    use crate::plan::{Action, Plan, Step, StepWrite, lifecycle_write};
    use inplace_proto::LifecycleState;

    let cs = demo_cloneset(json!({"lifecycle": {"inPlaceUpdate": {
        "labelsHandler": {"example.io/block": "true"},
        "finalizersHandler": ["example.io/hold"],
        "markPodNotReady": true,
    }}}));
    let action = Action::Lifecycle {
        pod: "demo-a".into(),
        from: Some(LifecycleState::Updated),
        to: LifecycleState::PreparingUpdate,
        mark_not_ready: Some(true),
    };
    let write = lifecycle_write::of(&cs, &action).unwrap();
    let plan = Plan {
        steps: vec![Step {
            action,
            write: Ok(StepWrite::Lifecycle(write)),
        }],
        ..Plan::default()
    };
    let v = render::json(&plan);
    assert_eq!(
        json!([v["steps"][0]["write"]]),
        json!([{
            "pod": "demo-a",
            "notReady": {"key": "preUpdateHook", "add": true},
            "labels": {"example.io/block": "true", "lifecycle.apps.kruise.io/state": "PreparingUpdate"},
            "finalizers": ["example.io/hold"],
        }])
    );
    let table = render::table(&cs, &plan, 1);
    assert!(
        table.contains(
            "     putting the inPlaceUpdate hook back: labels [example.io/block=true], \
             finalizers [example.io/hold]"
        ),
        "{table}"
    );
    // Nothing of the kind without lifecycle actions.
    assert_eq!(render::json(&Plan::default())["steps"], json!([]));
}

#[test]
fn a_completion_carrying_the_lifecycle_shows_it_in_json_and_under_its_action() {
    use crate::plan::completion_write::CompletionWrite;
    use crate::plan::{Action, Plan, Step, StepWrite, lifecycle_write};
    use inplace_proto::LifecycleState;

    let cs = demo_cloneset(json!({}));
    let complete = Action::CompleteInPlaceUpdate {
        pod: "demo-a".into(),
    };
    let lifecycle = Action::Lifecycle {
        pod: "demo-a".into(),
        from: Some(LifecycleState::Updating),
        to: LifecycleState::Normal,
        mark_not_ready: None,
    };
    let mut lifecycle_write = lifecycle_write::of(&cs, &lifecycle).unwrap();
    lifecycle_write.with_completion = true;
    let completion = CompletionWrite {
        pod: "demo-a".into(),
        resource_version: "7".into(),
        lifecycle_labels: [(
            "lifecycle.apps.kruise.io/state".to_owned(),
            "Normal".to_owned(),
        )]
        .into(),
    };
    let plan = Plan {
        steps: vec![
            Step {
                action: complete,
                write: Ok(StepWrite::Completion(completion)),
            },
            Step {
                action: lifecycle,
                write: Ok(StepWrite::Lifecycle(lifecycle_write)),
            },
        ],
        ..Plan::default()
    };
    let v = render::json(&plan);
    assert_eq!(
        json!([v["steps"][0]["write"]]),
        json!([{"pod": "demo-a", "resourceVersion": "7",
                "lifecycleLabels": {"lifecycle.apps.kruise.io/state": "Normal"}}])
    );
    assert_eq!(v["steps"][1]["write"]["withCompletion"], true);
    let table = render::table(&cs, &plan, 1);
    assert!(
        table.contains(
            "     writes: patch status of pod demo-a: InPlaceUpdateReady True, with lifecycle state Normal in the same patch (only on resourceVersion 7)"
        ),
        "{table}"
    );
    assert_eq!(render::json(&Plan::default())["steps"], json!([]));
}

#[test]
fn in_place_writes_are_shown_in_json_and_under_their_action() {
    use crate::plan::inplace_write::{Guard, InPlaceWrite, InPlaceWriteKind, Resize, ResizeVia};
    let cs = demo_cloneset(json!({}));
    let state = json!({"revision": "demo-new", "lastContainerStatuses": {},
                       "nextContainerImages": {"side": "side:2"}});
    let patch = json!({
        "metadata": {"annotations": {"apps.kruise.io/inplace-update-state": state.to_string()}},
        "spec": {"containers": [{"name": "main", "image": "nginx:2"}]},
    });
    let write = InPlaceWrite {
        action: 0,
        kind: InPlaceWriteKind::Start,
        pod: "demo-a".into(),
        resource_version: "41".into(),
        revision: "demo-new".into(),
        not_ready_first: true,
        patch: patch.clone().into(),
        resize: Some(Resize {
            via: ResizeVia::Subresource,
            containers: [("main".to_owned(), Default::default())].into(),
        }),
        guard: Guard::default(),
    };
    let plan = Plan {
        steps: vec![crate::plan::Step {
            action: crate::plan::Action::Update {
                pod: "demo-a".into(),
                method: crate::plan::UpdateMethod::InPlace,
                revision: "demo-new".into(),
            },
            write: Ok(crate::plan::StepWrite::InPlace(write)),
        }],
        ..Plan::default()
    };
    let v = render::json(&plan);
    let shown = &v["steps"][0]["write"];
    assert_eq!(shown["patch"], patch);
    assert_eq!(shown["kind"], "start");
    assert_eq!(shown["notReadyFirst"], true);
    assert_eq!(shown["resize"]["via"], "subresource");
    let table = render::table(&cs, &plan, 1);
    assert!(
        table.contains(
            "     writes: InPlaceUpdateReady False first; images [main=nginx:2]; \
             later batch [side]; resources of [main] through pods/resize \
             (only on resourceVersion 41)"
        ),
        "{table}"
    );
    assert_eq!(render::json(&Plan::default())["steps"], json!([]));
}

/// A CloneSet `demo` without containers, `extra` merged into its spec.
fn demo_cloneset(extra: serde_json::Value) -> inplace_proto::CloneSet {
    let mut cs = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "CloneSet",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {"metadata": {"labels": {"app": "demo"}}, "spec": {"containers": []}},
        },
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        cs["spec"][k] = v.clone();
    }
    serde_json::from_value(cs).unwrap()
}

#[test]
fn status_patches_and_skipped_writes_are_shown_under_their_action() {
    use crate::plan::action_write::{Patch, Target, Write};
    use crate::plan::{Action, Plan, Step, StepWrite};
    let cs = demo_cloneset(json!({}));
    let plan = Plan {
        steps: vec![
            Step {
                action: Action::CompleteInPlaceUpdate {
                    pod: "demo-a".into(),
                },
                write: Ok(StepWrite::Object(Write::Patch(Patch {
                    target: Target::PodStatus,
                    name: "demo-a".into(),
                    resource_version: Some("41".into()),
                    patch: json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True"}]}}),
                    stamp_conditions: true,
                }))),
            },
            Step {
                action: Action::CompleteInPlaceUpdate {
                    pod: "demo-b".into(),
                },
                write: Ok(StepWrite::Object(Write::Skip {
                    why: "the pod has no InPlaceUpdateReady readiness gate",
                })),
            },
        ],
        ..Plan::default()
    };
    let v = render::json(&plan);
    assert_eq!(v["steps"][0]["write"]["target"], "podStatus");
    assert_eq!(v["steps"][0]["write"]["stampConditions"], true);
    assert_eq!(v["steps"][1]["write"]["kind"], "skip");
    let table = render::table(&cs, &plan, 2);
    assert!(
        table.contains(
            "  1. finish the in-place update of pod demo-a (InPlaceUpdateReady=True)\n     \
             writes: patch status of pod demo-a \
             {\"status\":{\"conditions\":[{\"status\":\"True\",\"type\":\"InPlaceUpdateReady\"}]}} \
             (only on resourceVersion 41, conditions stamped with the write time)\n"
        ),
        "{table}"
    );
    assert!(
        table.contains("     writes: nothing (the pod has no InPlaceUpdateReady readiness gate)\n"),
        "{table}"
    );
    assert_eq!(render::json(&Plan::default())["steps"], json!([]));
}

/// `plan NAME` shows the adoption and release the controller makes before it plans, in
/// pod name order: an orphan with an instance id that matches the selector is adopted, a
/// pod of ours that no longer matches is released (each only on its UID); a pod without
/// an instance id is never seen by the controller, so never adopted.
#[test]
fn live_plans_start_with_the_pods_adopted_and_released() {
    let cs = input::cloneset(Source {
        name: "cs",
        text: CS,
    })
    .unwrap();
    let pod = |name: &str, labels: serde_json::Value, owners: serde_json::Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default",
            "uid": format!("uid-{name}"), "labels": labels, "ownerReferences": owners}}))
        .unwrap()
    };
    let ours = json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                       "name": "demo", "uid": "u1", "controller": true}]);
    let id = "apps.kruise.io/cloneset-instance-id";
    let pods = vec![
        pod(
            "demo-orphan",
            json!({"app": "demo", id: "orphan"}),
            json!([]),
        ),
        pod("demo-no-id", json!({"app": "demo"}), json!([])),
        pod(
            "demo-moved",
            json!({"app": "moved", id: "moved"}),
            ours.clone(),
        ),
        pod("demo-kept", json!({"app": "demo", id: "kept"}), ours),
    ];
    let inputs = live_inputs(cs, pods, Vec::new(), Vec::new()).unwrap();
    let now = "2026-01-02T00:00:00Z".parse().unwrap();
    let report = compute(&inputs, &Settings::default(), now, "cloneset/demo").unwrap();
    let actions = report.plan.actions();
    assert_eq!(
        actions[..2],
        [
            crate::plan::Action::ReleasePod {
                pod: "demo-moved".into()
            },
            crate::plan::Action::AdoptPod {
                pod: "demo-orphan".into()
            },
        ],
        "{actions:?}"
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("a reconcile of their own")),
        "{:?}",
        report.warnings
    );
    let table = render(&report, &inputs, Format::Table);
    assert!(
        table.contains("2. adopt orphan pod demo-orphan")
            && table.contains("(only on UID uid-demo-orphan)")
            && table.contains("1. release pod demo-moved")
            && table.contains("(only on UID uid-demo-moved)"),
        "{table}"
    );
    // From files there is nothing to adopt: the pods given are the CloneSet's.
    let from_files = load(src("cs.yaml", CS), Some(src("pods.yaml", PODS)), None, None).unwrap();
    let report = compute(&from_files, &Settings::default(), now, "cs.yaml").unwrap();
    assert!(
        report
            .plan
            .actions()
            .iter()
            .all(|a| !matches!(a, crate::plan::Action::AdoptPod { .. })),
    );
}

#[test]
fn rollout_and_set_image_take_a_name_or_a_selector() {
    use online::SetCommand;
    let parse = |args: &[&str]| {
        Cli::try_parse_from(std::iter::once("kubectl-inplace").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .command
    };
    for sub in ["status", "pause", "resume", "history", "restart", "undo"] {
        let Command::Rollout(r) = parse(&["rollout", sub, "-l", "app=web"]) else {
            panic!("{sub}: not a rollout");
        };
        let (name, select) = r.command.target();
        assert_eq!(name, None, "{sub}");
        assert_eq!(select, Some("app=web"), "{sub}");
        let Command::Rollout(r) = parse(&["rollout", sub, "--selector=tier=front,app!=x"]) else {
            panic!("{sub}: not a rollout");
        };
        assert!(
            format!("{r:?}").contains("tier=front,app!=x"),
            "{sub}: {r:?}"
        );
    }
    let Command::Set(s) = parse(&["set", "image", "-l", "app=web", "app=img:2"]) else {
        panic!("not a set");
    };
    let SetCommand::Image { words, select, .. } = s.command;
    assert_eq!(words, ["app=img:2"]);
    assert_eq!(select.selector.as_deref(), Some("app=web"));
}

#[test]
fn a_name_with_a_selector_or_neither_is_bad_input_before_connecting() {
    let run_args = |args: &[&str]| {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        // No kubeconfig can be read: a connection attempt would fail with "kubeconfig".
        let code = run(
            ["kubectl-inplace", "--kubeconfig", "/nonexistent/kubeconfig"]
                .into_iter()
                .chain(args.iter().copied()),
            &mut out,
            &mut err,
        );
        (code, String::from_utf8_lossy(&err).into_owned())
    };
    for sub in ["status", "pause", "resume", "history", "restart", "undo"] {
        let (code, err) = run_args(&["rollout", sub, "web", "-l", "app=web"]);
        assert_eq!(code, EXIT_BAD_INPUT, "{sub}: {err}");
        assert_eq!(
            err, "error: name cannot be provided when a selector is specified\n",
            "{sub}"
        );
        let (code, err) = run_args(&["rollout", sub]);
        assert_eq!(code, EXIT_BAD_INPUT, "{sub}: {err}");
        assert!(
            err.contains("required resource not specified"),
            "{sub}: {err}"
        );
    }
    let (code, err) = run_args(&["set", "image", "web", "-l", "app=web", "app=img:2"]);
    assert_eq!(code, EXIT_BAD_INPUT, "{err}");
    assert!(err.contains("name cannot be provided"), "{err}");
    // With a valid target the kubeconfig is read (and here fails): the target was fine.
    let (code, err) = run_args(&["rollout", "pause", "-l", "app=web"]);
    assert_eq!(code, EXIT_BAD_INPUT, "{err}");
    assert!(err.starts_with("error: kubeconfig: "), "{err}");
}
