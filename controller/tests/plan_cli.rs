//! `kubectl-inplace plan` run as a process on the fixture files under
//! `tests/fixtures/plan/` (issue 2 item 4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

const NOW: &str = "2026-03-01T12:00:00Z";

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plan")
        .join(name)
        .display()
        .to_string()
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// Fixture paths are absolute; snapshots should not depend on the checkout.
fn portable(text: &str) -> String {
    text.replace(&fixture(""), "fixtures/")
}

/// `plan` of the CloneSet file `cs` with the pods file `pods` and the partition sample's
/// revisions, at [`NOW`], printed as `output`.
/// The partition sample with each `(from, to)` replacement made, written into `dir`: its path.
fn edited_partition_cloneset(dir: &std::path::Path, edits: &[(&str, &str)]) -> String {
    let cs = edits.iter().fold(
        std::fs::read_to_string(fixture("partition-cloneset.yaml")).unwrap(),
        |cs, (from, to)| cs.replace(from, to),
    );
    let path = dir.join("cloneset.yaml");
    std::fs::write(&path, cs).unwrap();
    path.display().to_string()
}

/// The partition sample at `replicas` naming `names` in `podsToDelete`, read at
/// resourceVersion 901, written into `dir`: its path.
fn partition_to_delete(dir: &std::path::Path, replicas: u32, names: &str) -> String {
    let scaled = format!(
        "  replicas: {replicas}\n  scaleStrategy:\n    podsToDelete: [{names}]\n  selector:"
    );
    edited_partition_cloneset(
        dir,
        &[
            ("  replicas: 5\n  selector:", &scaled),
            (
                "  generation: 2\n",
                "  generation: 2\n  resourceVersion: \"901\"\n",
            ),
        ],
    )
}

fn partition_plan(cs: &str, pods: &str, output: &str) -> Output {
    run(&[
        "plan",
        "-f",
        cs,
        "--pods",
        pods,
        "--revisions",
        &fixture("partition-revisions.yaml"),
        "--now",
        NOW,
        "-o",
        output,
    ])
}

fn scale_up_args<'a>(cs: &'a str, pods: &'a str, pvcs: &'a str, output: &'a str) -> Vec<&'a str> {
    vec![
        "plan", "-f", cs, "--pods", pods, "--pvcs", pvcs, "--now", NOW, "-o", output,
    ]
}

#[test]
fn scale_up_creates_the_missing_pods_within_the_rate_limit_reusing_a_free_pvc() {
    let (cs, pods, pvcs) = (
        fixture("scale-up-cloneset.yaml"),
        fixture("scale-up-pods.yaml"),
        fixture("scale-up-pvcs.yaml"),
    );
    let out = run(&scale_up_args(&cs, &pods, &pvcs, "json"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
    let v = json(&out);
    assert_eq!(v["resolved"]["replicas"], 5);
    assert_eq!(v["resolved"]["scaleMaxUnavailable"], 2);
    assert_eq!(v["diffs"]["scaleUp"], 3);
    assert_eq!(v["diffs"]["scaleUpLimit"], 2);
    let actions = v["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 2, "{actions:?}");
    let ids: Vec<&str> = actions
        .iter()
        .map(|a| a["create"]["instanceId"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"qq7fd"),
        "the free PVC's id is reused: {ids:?}"
    );
    for a in actions {
        assert_eq!(a["create"]["revision"], v["revisions"]["update"]);
    }
    assert_eq!(v["status"]["replicas"], 2);
    insta::assert_json_snapshot!("scale_up_json", v);

    let table = run(&scale_up_args(&cs, &pods, &pvcs, "table"));
    assert_eq!(table.status.code(), Some(0));
    insta::assert_snapshot!("scale_up_table", stdout(&table));
}

#[test]
fn partition_updates_replicas_minus_partition_pods_in_place_one_at_a_time() {
    let out = run(&[
        "plan",
        "-f",
        &fixture("partition-cloneset.yaml"),
        "--pods",
        &fixture("partition-pods.yaml"),
        "--revisions",
        &fixture("partition-revisions.yaml"),
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["resolved"]["partition"], 3);
    assert_eq!(v["revisions"]["current"], "sample-d4d4fb5bd");
    assert_eq!(v["diffs"]["update"], 2);
    assert_eq!(v["diffs"]["updateMaxUnavailable"], 1);
    let actions = v["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "maxUnavailable 20% of 5 = 1: {actions:?}");
    assert_eq!(actions[0]["update"]["method"], "inPlace");
    assert_eq!(v["status"]["expectedUpdatedReplicas"], 2);
    insta::assert_json_snapshot!("partition_json", v);
}

#[test]
fn partition_rollback_flag_and_revision_overrides_are_honoured() {
    // Pretend the pods already run the update revision and the partition asks for all of
    // them to stay on the old one: with --partition-rollback, they go back.
    let out = run(&[
        "plan",
        "-f",
        &fixture("partition-cloneset.yaml"),
        "--pods",
        &fixture("partition-pods.yaml"),
        "--update-revision",
        "sample-d4d4fb5bd",
        "--current-revision",
        "sample-older",
        "--partition-rollback",
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["revisions"]["update"], "sample-d4d4fb5bd");
    assert_eq!(v["revisions"]["current"], "sample-older");
    // 5 pods on the update revision, partition 3 → 3 go back.
    assert_eq!(v["diffs"]["update"], -3);
}

#[test]
fn unparsable_yaml_exits_2_with_one_line_naming_the_file_and_position() {
    let cs = fixture("bad-syntax-cloneset.yaml");
    let out = run(&["plan", "-f", &cs, "--now", NOW]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with(&format!("error: {cs}:10:")), "{err}");
}

#[test]
fn wrong_type_exits_2_naming_the_file_and_the_field() {
    let out = run(&[
        "plan",
        "-f",
        &fixture("partition-cloneset.yaml"),
        "--pods",
        &fixture("bad-type-pods.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        portable(&err),
        "error: fixtures/bad-type-pods.yaml: items[0].spec.containers[0].ports[0].containerPort: invalid type: string \"http\", expected i32\n"
    );
}

#[test]
fn pod_outside_the_selector_exits_2_naming_the_pod() {
    let out = run(&[
        "plan",
        "-f",
        &fixture("partition-cloneset.yaml"),
        "--pods",
        &fixture("other-app-pods.yaml"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = portable(&stderr(&out));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: fixtures/other-app-pods.yaml: pod web-abcde: metadata.labels:"),
        "{err}"
    );
}

#[test]
fn missing_file_and_bad_time_exit_2() {
    let out = run(&["plan", "-f", &fixture("no-such-file.yaml")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no-such-file.yaml: cannot read"));
    let out = run(&[
        "plan",
        "-f",
        &fixture("partition-cloneset.yaml"),
        "--now",
        "yesterday",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).starts_with("error: --now:"));
}

#[test]
fn cloneset_the_crd_rejects_is_still_planned_with_a_warning() {
    let cs = fixture("inplaceonly-surge-cloneset.yaml");
    let out = run(&["plan", "-f", &cs, "--now", NOW, "-o", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("spec.updateStrategy.maxSurge: must be 0 with type InPlaceOnly"),
        "{err}"
    );
    let v = json(&out);
    assert_eq!(v["diffs"]["scaleUp"], 2);
}

#[test]
fn help_exits_0() {
    let out = run(&["plan", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("--partition-rollback"));
}

/// `kubectl inplace rollout restart` on the docs' partition sample (5 pods, partition 3,
/// the default maxUnavailable 20% = 1): the restartedAt change moves 2 pods, one at a time,
/// in place; with an env change as well, the same pod is recreated instead; with an
/// inPlaceUpdate hook the pod first goes to PreparingUpdate. (The restart of the containers
/// itself is decided in `plan::inplace` and carried out by the daemon: see their tests.)
#[test]
fn a_restart_goes_in_place_within_partition_and_max_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(fixture("partition-cloneset.yaml")).unwrap();
    let restarted = base.replace(
        "      labels:\n        app: sample\n    spec:\n      containers:\n      - image: nginx:mainline",
        "      labels:\n        app: sample\n      annotations:\n        kubectl.kubernetes.io/restartedAt: \"2026-03-01T11:59:00Z\"\n    spec:\n      containers:\n      - image: nginx:alpine",
    );
    assert_ne!(restarted, base, "the fixture changed shape");
    let with_env = restarted.replace(
        "        name: nginx\n",
        "        name: nginx\n        env: [{name: A, value: b}]\n",
    );
    assert_ne!(with_env, restarted);
    let plan = |text: &str| {
        let path = dir.path().join("cs.yaml");
        std::fs::write(&path, text).unwrap();
        let out = run(&[
            "plan",
            "-f",
            path.to_str().unwrap(),
            "--pods",
            &fixture("partition-pods.yaml"),
            "--revisions",
            &fixture("partition-revisions.yaml"),
            "--now",
            NOW,
            "-o",
            "json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        json(&out)
    };
    let v = plan(&restarted);
    assert_eq!(v["diffs"]["update"], 2);
    let actions = v["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["update"]["method"], "inPlace");
    let v = plan(&with_env);
    let actions = v["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["update"]["method"], "recreate");

    // With an inPlaceUpdate hook that the pods carry, the chosen pod first waits in
    // PreparingUpdate (the user's controller releases it), as for any in-place update.
    let hooked = restarted.replace(
        "  updateStrategy:\n",
        "  lifecycle:\n    inPlaceUpdate:\n      labelsHandler: {example.io/hold: \"true\"}\n  updateStrategy:\n",
    );
    assert_ne!(hooked, restarted);
    let pods = std::fs::read_to_string(fixture("partition-pods.yaml"))
        .unwrap()
        .replace(
            "    lifecycle.apps.kruise.io/state: Normal\n",
            "    lifecycle.apps.kruise.io/state: Normal\n    example.io/hold: \"true\"\n",
        );
    let pods_path = dir.path().join("pods.yaml");
    std::fs::write(&pods_path, pods).unwrap();
    let cs_path = dir.path().join("hooked.yaml");
    std::fs::write(&cs_path, &hooked).unwrap();
    let out = run(&[
        "plan",
        "-f",
        cs_path.to_str().unwrap(),
        "--pods",
        pods_path.to_str().unwrap(),
        "--revisions",
        &fixture("partition-revisions.yaml"),
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let actions = v["actions"].as_array().unwrap();
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(
        actions[0]["lifecycle"]["to"], "PreparingUpdate",
        "{actions:?}"
    );
}

#[test]
fn the_readiness_gate_conditions_a_pod_lacks_are_shown_as_writes() {
    let cs = fixture("partition-cloneset.yaml");
    let run_with = |pods: &str, output: &str| partition_plan(&cs, &fixture(pods), output);
    let gated = run_with("gated-pods.yaml", "json");
    assert_eq!(gated.status.code(), Some(0), "{}", stderr(&gated));
    let v = json(&gated);
    assert_eq!(
        v["podConditions"],
        serde_json::json!([{
            "pod": "sample-chvnr",
            "resourceVersion": "812",
            "conditions": ["InPlaceUpdateReady", "KruisePodReady"],
        }])
    );
    // The same decision as without the missing conditions; none shown there.
    let plain = json(&run_with("partition-pods.yaml", "json"));
    assert_eq!(v["actions"], plain["actions"]);
    assert_eq!(plain.get("podConditions"), None);

    let table = stdout(&run_with("gated-pods.yaml", "table"));
    assert!(
        table.contains(
            "  - set InPlaceUpdateReady and KruisePodReady True on pod sample-chvnr \
             (its readiness gates; only on resourceVersion 812)"
        ),
        "{table}"
    );
}

#[test]
fn deletes_and_patches_are_shown_with_their_preconditions() {
    // The partition sample scaled to 4 with one of its pods and a gone one named in
    // podsToDelete: the named pod is deleted (only with its UID) and the gone name pruned.
    let dir = tempfile::tempdir().unwrap();
    let cs_path = partition_to_delete(dir.path(), 4, "sample-chvnr, sample-gone");
    let pods = fixture("partition-pods.yaml");
    let out = partition_plan(&cs_path, &pods, "json");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    insta::assert_json_snapshot!("delete_and_prune_steps_json", v["steps"]);
    let table = stdout(&partition_plan(&cs_path, &pods, "table"));
    insta::assert_snapshot!("delete_and_prune_writes_table", table);
}

#[test]
fn the_status_write_and_the_problem_events_are_shown_as_writes() {
    // The partition sample naming a gone pod in podsToDelete: the planner reports
    // FailedScale, whose condition the status write carries and whose event is new.
    let dir = tempfile::tempdir().unwrap();
    let cs_path = partition_to_delete(dir.path(), 5, "sample-gone");
    let pods = fixture("partition-pods.yaml");
    let out = partition_plan(&cs_path, &pods, "json");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = json(&out);
    let write = &v["statusWrite"];
    assert_eq!(write["target"], "cloneSetStatus");
    assert_eq!(write["name"], "sample");
    assert_eq!(write["resourceVersion"], "901");
    // The body is the planner's status, conditional on the version read.
    assert_eq!(write["patch"]["metadata"]["resourceVersion"], "901");
    let body = &write["patch"]["status"];
    for field in [
        "replicas",
        "readyReplicas",
        "updatedReplicas",
        "currentRevision",
    ] {
        assert_eq!(body[field], v["status"][field], "{field}");
    }
    let conditions = body["conditions"].as_array().unwrap();
    let failed: Vec<&Value> = conditions
        .iter()
        .filter(|c| c["type"] == "FailedScale")
        .collect();
    assert_eq!(failed.len(), 1, "{conditions:?}");
    assert_eq!(failed[0]["status"], "True");
    assert_eq!(failed[0]["reason"], v["problems"][0]["reason"]);
    assert_eq!(failed[0]["lastTransitionTime"], NOW);
    // The problem's Warning event, regarding the CloneSet.
    let events = write["events"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["warning"], true);
    assert_eq!(events[0]["action"], "FailedScale");
    assert_eq!(events[0]["reason"], v["problems"][0]["reason"]);
    assert_eq!(events[0]["message"], v["problems"][0]["message"]);
    assert_eq!(events[0]["regardingPod"], false);

    let table = stdout(&partition_plan(&cs_path, &pods, "table"));
    assert!(
        table.contains(
            "  writes: merge patch of the status of CloneSet default/sample (only on resourceVersion 901)\n"
        ),
        "{table}"
    );
    let event_line = format!(
        "  event Warning {} (FailedScale) regarding the CloneSet: {}\n",
        v["problems"][0]["reason"].as_str().unwrap(),
        v["problems"][0]["message"].as_str().unwrap()
    );
    assert!(table.contains(&event_line), "{table}");
}

#[test]
fn the_deletion_protection_finalizer_is_a_step_of_its_own_with_its_write() {
    // The partition sample labelled for deletion protection, planned with the gate on: the
    // reconcile first writes the finalizer (the whole list, only on the version read) and
    // nothing else; without the gate nothing about it is planned.
    let dir = tempfile::tempdir().unwrap();
    let cs_path = edited_partition_cloneset(
        dir.path(),
        &[
            (
                "  labels:\n    app: sample\n",
                "  labels:\n    app: sample\n    policy.kruise.io/delete-protection: Always\n",
            ),
            (
                "  generation: 2\n",
                "  generation: 2\n  resourceVersion: \"902\"\n  finalizers: [example.com/keep]\n",
            ),
        ],
    );
    let pods = fixture("partition-pods.yaml");
    let with_gate = |output: &str| {
        run(&[
            "plan",
            "-f",
            &cs_path,
            "--pods",
            &pods,
            "--revisions",
            &fixture("partition-revisions.yaml"),
            "--now",
            NOW,
            "--deletion-protection",
            "-o",
            output,
        ])
    };
    let out = with_gate("json");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("a reconcile of their own"),
        "{}",
        stderr(&out)
    );
    let v = json(&out);
    insta::assert_json_snapshot!("deletion_protection_step_json", v["steps"][0]);
    let table = stdout(&with_gate("table"));
    let next_step = table
        .split("\nNext step\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_default();
    insta::assert_snapshot!("deletion_protection_step_table", next_step);

    let without = json(&partition_plan(&cs_path, &pods, "json"));
    let actions = without["actions"].as_array().unwrap();
    assert!(
        actions.iter().all(|a| a.get("addFinalizer").is_none()),
        "{actions:?}"
    );
    assert_eq!(
        without["steps"].as_array().unwrap().len() + 1,
        v["steps"].as_array().unwrap().len()
    );
}

#[test]
fn image_pre_download_is_planned_as_steps_with_their_writes() {
    // The partition sample with its update revision stored (named by --update-revision):
    // with the gate, the reconcile first creates the ImagePullJob of the changed image,
    // then labels the revision; with the job given as existing, only the label is written;
    // without the gate, nothing of it is planned.
    let dir = tempfile::tempdir().unwrap();
    let update = "sample-5b9c7d6f8";
    let revisions = dir.path().join("revisions.yaml");
    let stored = std::fs::read_to_string(fixture("partition-revisions.yaml")).unwrap();
    let new_revision = format!(
        "- apiVersion: apps/v1
  kind: ControllerRevision
  metadata:
    name: {update}
    namespace: default
    labels: {{app: sample, controller.kubernetes.io/hash: 5b9c7d6f8}}
  revision: 2
  data:
    spec:
      template:
        $patch: replace
        metadata:
          labels: {{app: sample}}
        spec:
          containers:
          - {{image: 'nginx:mainline', imagePullPolicy: Always, name: nginx}}
"
    );
    std::fs::write(&revisions, format!("{stored}{new_revision}")).unwrap();
    let revisions = revisions.display().to_string();
    let (cs, pods) = (
        fixture("partition-cloneset.yaml"),
        fixture("partition-pods.yaml"),
    );
    let plan = |extra: &[&str], output: &str| {
        let mut args = vec![
            "plan",
            "-f",
            &cs,
            "--pods",
            &pods,
            "--revisions",
            &revisions,
            "--update-revision",
            update,
            "--now",
            NOW,
            "-o",
            output,
        ];
        args.extend_from_slice(extra);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        out
    };
    let job = format!("{update}-nginx");

    let v = json(&plan(&["--pre-download-image"], "json"));
    let create = &v["steps"][0];
    assert_eq!(
        create["action"],
        serde_json::json!({"createImagePullJob": {"job": job, "image": "nginx:mainline"}})
    );
    let body = &create["write"]["job"];
    assert_eq!(create["write"]["kind"], "createImagePullJob");
    assert_eq!(body["metadata"]["name"], job.as_str());
    assert_eq!(body["spec"]["image"], "nginx:mainline");
    assert_eq!(
        body["metadata"]["ownerReferences"][0]["uid"],
        "0b7c6d2e-2222-4a5b-9c3d-000000000002"
    );
    assert!(
        body["metadata"]["annotations"]["inplace.kruise.io/predownload-node-order"]
            .as_str()
            .is_some_and(|nodes| nodes.contains("node-0") && nodes.contains("node-1")),
        "{body}"
    );
    let label = &v["steps"][1];
    assert_eq!(
        label["action"],
        serde_json::json!({"labelPreDownloadRevision": {"revision": update}})
    );
    assert_eq!(
        label["write"],
        serde_json::json!({"kind": "patch", "target": "controllerRevision", "name": update,
            "patch": {"metadata": {"labels": {"apps.kruise.io/pre-predownload-created": "true"}}}})
    );
    // The pods' own steps follow.
    assert!(
        v["steps"][2]["action"].get("update").is_some(),
        "{}",
        v["steps"]
    );
    let table = stdout(&plan(&["--pre-download-image"], "table"));
    assert!(
        table.contains(&format!(
            "create ImagePullJob {job} to pull nginx:mainline on the nodes of the pods still to update"
        )) && table.contains(&format!(
            "writes: create ImagePullJob {job} pulling nginx:mainline"
        )) && table.contains(&format!(
            "writes: patch ControllerRevision {update} {{\"metadata\":{{\"labels\":{{\"apps.kruise.io/pre-predownload-created\":\"true\"}}}}}} (on any version)"
        )),
        "{table}"
    );

    // The job exists already: nothing to write for it, the label still follows.
    let jobs = dir.path().join("jobs.yaml");
    std::fs::write(
        &jobs,
        format!(
            "apiVersion: apps.kruise.io/v1beta1
kind: ImagePullJob
metadata:
  name: {job}
  namespace: default
  uid: job-uid
  ownerReferences:
  - {{apiVersion: apps.kruise.io/v1alpha1, kind: CloneSet, name: sample, uid: 0b7c6d2e-2222-4a5b-9c3d-000000000002, controller: true}}
spec: {{image: 'nginx:mainline'}}
"
        ),
    )
    .unwrap();
    let jobs = jobs.display().to_string();
    let v = json(&plan(
        &["--pre-download-image", "--image-pull-jobs", &jobs],
        "json",
    ));
    assert_eq!(
        v["steps"][0]["write"],
        serde_json::json!({"why": "the ImagePullJob exists already"})
    );
    assert!(
        v["steps"][1]["action"]
            .get("labelPreDownloadRevision")
            .is_some()
    );

    // Without the gate: no pre-download step.
    let v = json(&plan(&[], "json"));
    let actions = v["actions"].as_array().unwrap();
    assert!(
        actions.iter().all(|a| a.get("createImagePullJob").is_none()
            && a.get("labelPreDownloadRevision").is_none()),
        "{actions:?}"
    );
}
