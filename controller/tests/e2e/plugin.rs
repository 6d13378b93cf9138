//! `kubectl-inplace` online subcommands against the test bed.
//!
//! - `rollout status|pause|resume` and `warm-up` run without the controller: the test creates
//!   the CloneSet itself and writes its status through the status subresource.
//! - `set image`, `rollout history|undo` and `scale-down` run with the controller (one process
//!   per namespace, see `support`), and check that pods update in place (same UIDs).
//! - `rollout restart` runs with the controller and the node daemon: every container of
//!   every pod restarted in place (same UID and IP, restartCount + 1), never more than
//!   maxUnavailable pods unready; then `get` (one-shot, JSON and table, and `--watch` into a
//!   pipe) shows the result.
//! - `plan NAME` is compared with the offline plan of the same objects dumped with kubectl.
//! - `completion` and argument errors need no bed (not ignored).
//!
//! ```text
//! . /var/tmp/inplace-testbed/env
//! cargo test -p inplace-controller --test e2e -- --ignored plugin::
//! ```
//! (environment: see `support`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e_support::{
    Controller, Namespace, TestResult, container_image, image, sample_cloneset, wait_for,
    wait_rolled_out,
};
use inplace_proto::{CloneSet, ImagePullJob};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Runs the plugin binary with the bed's kubeconfig.
fn plugin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .arg("--kubeconfig")
        .arg(e2e_support::kubeconfig())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

async fn client() -> Client {
    e2e_support::client().await.unwrap()
}

fn paused(ns: &Namespace, name: &str) -> Value {
    ns.cloneset(name).unwrap()["spec"]["updateStrategy"]["paused"].clone()
}

/// A CloneSet of 3 replicas of the v1 image (no controller runs in these tests: no pods).
fn apply_demo(ns: &Namespace) {
    ns.apply(&sample_cloneset(
        "demo",
        3,
        &image("v1"),
        "InPlaceIfPossible",
    ))
    .unwrap();
}

/// Host process: needs no controller at all (its CloneSet is to get no pods); the installed
/// one serves every namespace.
#[test]
#[ignore = "needs the test bed"]
fn host_pause_and_resume_round_trip() {
    let ns = Namespace::create("plugin-pause").unwrap();
    apply_demo(&ns);

    let o = plugin(&["-n", &ns.name, "rollout", "pause", "demo"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert_eq!(out, "cloneset.apps.kruise.io/demo paused\n");
    assert_eq!(paused(&ns, "demo"), json!(true));

    // Flags after the subcommand, like kubectl; a second pause changes nothing.
    let o = plugin(&["rollout", "pause", "demo", "-n", &ns.name]);
    assert_eq!(text(&o).0, "cloneset.apps.kruise.io/demo already paused\n");

    let o = plugin(&["rollout", "resume", "demo", "--namespace", &ns.name]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert_eq!(out, "cloneset.apps.kruise.io/demo resumed\n");
    assert_eq!(paused(&ns, "demo"), json!(false));

    let o = plugin(&["-n", &ns.name, "rollout", "pause", "missing"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("cloneset missing not found"), "{err}");
}

async fn write_status(api: &Api<CloneSet>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await
    .unwrap();
}

/// Host process: needs no controller at all: the test writes the CloneSet's status itself,
/// which the installed controller would overwrite.
#[tokio::test]
#[ignore = "needs the test bed"]
async fn host_rollout_status_follows_the_status_the_test_writes() {
    let ns = Namespace::create("plugin-status").unwrap();
    apply_demo(&ns);
    let api: Api<CloneSet> = Api::namespaced(client().await, &ns.name);
    let generation = api.get("demo").await.unwrap().metadata.generation.unwrap();

    // In progress: the plugin keeps waiting and times out (exit 1).
    write_status(
        &api,
        "demo",
        json!({"observedGeneration": generation, "replicas": 3, "readyReplicas": 3,
               "availableReplicas": 3, "updatedReplicas": 1, "updatedReadyReplicas": 0,
               "expectedUpdatedReplicas": 3}),
    )
    .await;
    let o = plugin(&[
        "-n",
        &ns.name,
        "rollout",
        "status",
        "demo",
        "--timeout",
        "2s",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("updated 1/3, ready 3, available 3, updated ready 0"),
        "{out}"
    );
    assert!(err.contains("timed out after 2s"), "{err}");

    // Completed while the plugin watches: exit 0 with the final line.
    let ns_name = ns.name.clone();
    let child = std::thread::spawn(move || {
        plugin(&[
            "-n",
            &ns_name,
            "rollout",
            "status",
            "demo",
            "--timeout",
            "60s",
        ])
    });
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    write_status(
        &api,
        "demo",
        json!({"updatedReplicas": 2, "updatedReadyReplicas": 2}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    write_status(
        &api,
        "demo",
        json!({"updatedReplicas": 3, "updatedReadyReplicas": 3}),
    )
    .await;
    let o = tokio::task::spawn_blocking(move || child.join().unwrap())
        .await
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(start.elapsed() < Duration::from_secs(30));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "updated 1/3, ready 3, available 3, updated ready 0",
            "updated 2/3, ready 3, available 3",
            "updated 3/3, ready 3, available 3",
            "cloneset demo successfully rolled out",
        ],
        "{out}"
    );

    // A new generation not yet observed is not done.
    ns.patch_cloneset("demo", &json!({"spec": {"minReadySeconds": 1}}))
        .unwrap();
    let o = plugin(&[
        "-n",
        &ns.name,
        "rollout",
        "status",
        "demo",
        "--timeout",
        "2s",
    ]);
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("waiting for the controller to observe generation"),
        "{out}"
    );

    // Progressing=False: exit 1 with the condition's reason and message.
    let generation = api.get("demo").await.unwrap().metadata.generation.unwrap();
    write_status(
        &api,
        "demo",
        json!({"observedGeneration": generation, "updatedReplicas": 1, "updatedReadyReplicas": 1,
               "conditions": [{"type": "Progressing", "status": "False",
                               "reason": "ProgressDeadlineExceeded",
                               "message": "CloneSet demo has timed out progressing."}]}),
    )
    .await;
    let o = plugin(&[
        "-n",
        &ns.name,
        "rollout",
        "status",
        "demo",
        "--timeout",
        "30s",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains(
            "cloneset demo: ProgressDeadlineExceeded: CloneSet demo has timed out progressing."
        ),
        "{err}"
    );
}

/// Host process: needs no controller at all: the test writes the ImagePullJob's status
/// itself, which the installed controller would overwrite.
#[tokio::test]
#[ignore = "needs the test bed"]
async fn host_warm_up_creates_an_image_pull_job() {
    let ns = Namespace::create("plugin-warmup").unwrap();
    let o = plugin(&[
        "-n",
        &ns.name,
        "warm-up",
        "127.0.0.1:5000/inplace-test/app:v2",
        "--nodes",
        "node-b,node-a",
        "--parallelism",
        "2",
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    let name = out
        .trim()
        .strip_prefix("imagepulljob.apps.kruise.io/")
        .and_then(|s| s.strip_suffix(" created"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    assert!(name.starts_with("warm-up-"), "{name}");
    let api: Api<ImagePullJob> = Api::namespaced(client().await, &ns.name);
    let job = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
    assert_eq!(job["spec"]["image"], "127.0.0.1:5000/inplace-test/app:v2");
    assert_eq!(
        job["spec"]["selector"]["names"],
        json!(["node-a", "node-b"])
    );
    assert_eq!(job["spec"]["parallelism"], 2);

    // --wait follows the status (written here in place of the controller).
    let ns_name = ns.name.clone();
    let child = std::thread::spawn(move || {
        plugin(&[
            "-n",
            &ns_name,
            "warm-up",
            "img:v3",
            "-l",
            "zone=a",
            "--wait",
            "--timeout",
            "60s",
        ])
    });
    let start = Instant::now();
    let created = loop {
        let list = api.list(&Default::default()).await.unwrap();
        if let Some(j) = list.items.into_iter().find(|j| j.spec.image == "img:v3") {
            break j;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no job created");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let name = created.metadata.name.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"status": {"desired": 2, "succeeded": 1, "failed": 1,
            "failedNodes": ["n2"], "completionTime": "2026-01-01T00:00:00Z",
            "startTime": "2026-01-01T00:00:00Z"}}),
        ),
    )
    .await
    .unwrap();
    let o = tokio::task::spawn_blocking(move || child.join().unwrap())
        .await
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains(&format!("imagepulljob.apps.kruise.io/{name} created")),
        "{out}"
    );
    assert!(out.contains("succeeded 1/2, active 0, failed 1"), "{out}");
    assert!(err.contains("1 node(s) failed: n2"), "{err}");
}

// ---------- day-2 commands, with the controller running (one per namespace) ----------

const ROLLOUT: Duration = Duration::from_secs(150);

/// Runs the plugin in `ns`; (exit code, stdout, stderr).
fn plugin_in(ns: &Namespace, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["-n", ns.name.as_str()];
    all.extend(args);
    let o = plugin(&all);
    let (out, err) = text(&o);
    (o.status.code().unwrap_or(-1), out, err)
}

/// `rollout history -o json` of `name`.
fn history(ns: &Namespace, name: &str) -> TestResult<Value> {
    let (code, out, err) = plugin_in(ns, &["rollout", "history", name, "-o", "json"]);
    if code != 0 {
        return Err(format!("rollout history: exit {code}: {err}").into());
    }
    Ok(serde_json::from_str(&out)?)
}

#[test]
fn completion_scripts_for_bash_and_zsh() {
    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .args(["completion", "bash"])
        .output()
        .unwrap();
    let (bash, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    for word in [
        "scale-down",
        "history",
        "undo",
        "image",
        "--to-revision",
        "--context",
    ] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }
    // The script is valid bash.
    let dir = std::env::temp_dir().join(format!("inplace-completion-{}", std::process::id()));
    std::fs::write(&dir, &bash).unwrap();
    let check = Command::new("bash").arg("-n").arg(&dir).output().unwrap();
    let _ = std::fs::remove_file(&dir);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .args(["completion", "zsh"])
        .output()
        .unwrap();
    let (zsh, _) = text(&o);
    assert_eq!(o.status.code(), Some(0));
    assert!(zsh.starts_with("#compdef kubectl-inplace"), "{zsh}");
    assert!(zsh.contains("scale-down"));

    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .args(["completion", "fish"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_target_of_another_kind_is_bad_input() {
    let o = Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .args(["rollout", "history", "deployment/web"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("\"deployment/web\" is not a CloneSet: give NAME or cloneset/NAME"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn set_image_history_and_undo_update_pods_in_place() -> TestResult {
    let ns = Namespace::create("plugin-day2")?;
    let _ctl = Controller::start(&ns.name)?;
    let (v1, v2) = (image("v1"), image("v2"));
    ns.apply(&sample_cloneset("dd", 2, &v1, "InPlaceIfPossible"))?;
    wait_rolled_out(&ns, "dd", 2, ROLLOUT)?;
    let uids = ns.live_pod_uids()?;
    assert_eq!(uids.len(), 2);

    // Unknown containers are named; nothing is written.
    let (code, _, err) = plugin_in(&ns, &["set", "image", "dd", "nope=x:1", "app=x:2"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cloneset dd has no container named nope (containers: app)"),
        "{err}"
    );
    assert_eq!(
        ns.cloneset("dd")?["spec"]["template"]["spec"]["containers"][0]["image"],
        json!(v1)
    );

    // A change cause on the CloneSet is copied into the revision the change makes.
    ns.kubectl(&[
        "annotate",
        "cloneset",
        "dd",
        "kubernetes.io/change-cause=to v2",
    ])?;
    // `cloneset/NAME`, --context and --kubeconfig (given by plugin()).
    let set = format!("app={v2}");
    let (code, out, err) = plugin_in(
        &ns,
        &[
            "--context",
            "inplace-testbed",
            "set",
            "image",
            "cloneset/dd",
            &set,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "cloneset.apps.kruise.io/dd image updated\n");
    // The same image again changes nothing.
    let (code, out, _) = plugin_in(&ns, &["set", "image", "dd", &set]);
    assert_eq!(
        (code, out.as_str()),
        (0, "cloneset.apps.kruise.io/dd image unchanged\n")
    );
    // A context the kubeconfig lacks is bad input.
    let (code, _, err) = plugin_in(&ns, &["--context", "nope", "rollout", "history", "dd"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("kubeconfig"), "{err}");

    wait_rolled_out(&ns, "dd", 2, ROLLOUT)?;
    assert_eq!(ns.live_pod_uids()?, uids, "set image recreated pods");
    for pod in ns.pods()?.values() {
        assert_eq!(container_image(pod), v2);
    }

    // History: two revisions, the second with its cause and its image change.
    let h = history(&ns, "dd")?;
    let entries = h.as_array().ok_or("history is not a list")?;
    assert_eq!(entries.len(), 2, "{h}");
    assert_eq!(entries[0]["revision"], 1);
    assert_eq!(entries[0]["images"], json!([["app", v1]]));
    assert_eq!(entries[0]["changes"], json!([]));
    assert_eq!(entries[0]["current"], false);
    assert!(entries[0].get("changeCause").is_none(), "{h}");
    assert_eq!(entries[1]["revision"], 2);
    assert_eq!(entries[1]["changeCause"], "to v2");
    assert_eq!(entries[1]["changes"], json!([format!("app: {v1} -> {v2}")]));
    assert_eq!(entries[1]["current"], true);
    let rev1_name = entries[0]["name"].as_str().unwrap_or_default().to_owned();
    assert!(rev1_name.starts_with("dd-"), "{h}");

    // The same data as YAML; the table by default.
    let (code, yaml, err) = plugin_in(&ns, &["rollout", "history", "dd", "-o", "yaml"]);
    assert_eq!(code, 0, "{err}");
    let from_yaml: Value = serde_saphyr::from_str(&yaml)?;
    assert_eq!(from_yaml, h);
    let (code, table, _) = plugin_in(&ns, &["rollout", "history", "cloneset/dd"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[0], "cloneset.apps.kruise.io/dd", "{table}");
    assert!(lines[1].starts_with("REVISION"), "{table}");
    let cells = |line: &str| -> Vec<String> {
        line.split_whitespace().take(3).map(str::to_owned).collect()
    };
    assert_eq!(
        cells(lines[2]),
        ["1", rev1_name.as_str(), "<none>"],
        "{table}"
    );
    assert_eq!(cells(lines[3])[0], "2*", "{table}");
    assert!(lines[3].contains("to v2"), "{table}");

    // --revision N: that revision's template.
    let (code, out, err) = plugin_in(
        &ns,
        &["rollout", "history", "dd", "--revision", "1", "-o", "json"],
    );
    assert_eq!(code, 0, "{err}");
    let tpl: Value = serde_json::from_str(&out)?;
    assert_eq!(tpl["spec"]["containers"][0]["image"], json!(v1));
    let (code, out, _) = plugin_in(&ns, &["rollout", "history", "dd", "--revision", "1"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(&format!(
            "cloneset.apps.kruise.io/dd revision 1 ({rev1_name})\n"
        )),
        "{out}"
    );
    assert!(out.contains(&format!("image: {v1}")), "{out}");
    let (code, _, err) = plugin_in(&ns, &["rollout", "history", "dd", "--revision", "7"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cloneset dd has no revision 7 (revisions: 1, 2)"),
        "{err}"
    );

    // Undo: refused to the current template or a missing revision.
    let (code, _, err) = plugin_in(&ns, &["rollout", "undo", "dd", "--to-revision", "2"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("revision 2 of cloneset dd is already the current template"),
        "{err}"
    );
    let (code, _, err) = plugin_in(&ns, &["rollout", "undo", "dd", "--to-revision", "9"]);
    assert_eq!(code, 2);
    assert!(err.contains("has no revision 9"), "{err}");

    // Undo to the previous revision: pods go back to v1 in place.
    let (code, out, err) = plugin_in(&ns, &["rollout", "undo", "dd", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let after: Value = serde_json::from_str(&out)?;
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["image"],
        json!(v1)
    );
    wait_rolled_out(&ns, "dd", 2, ROLLOUT)?;
    assert_eq!(ns.live_pod_uids()?, uids, "undo recreated pods");
    for pod in ns.pods()?.values() {
        assert_eq!(container_image(pod), v1);
    }
    // The controller reuses revision 1's object and renumbers it 3.
    wait_for("revision 1 renumbered 3", ROLLOUT, || {
        let h = history(&ns, "dd")?;
        Ok(h[1]["revision"] == 3 && h[1]["name"] == json!(rev1_name) && h[1]["current"] == true)
    })?;
    let (code, out, err) = plugin_in(&ns, &["rollout", "undo", "dd"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "cloneset.apps.kruise.io/dd rolled back to revision 2\n"
    );
    wait_rolled_out(&ns, "dd", 2, ROLLOUT)?;
    assert_eq!(ns.live_pod_uids()?, uids, "second undo recreated pods");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn scale_down_deletes_the_named_pods_only() -> TestResult {
    let ns = Namespace::create("plugin-scaledown")?;
    let _ctl = Controller::start(&ns.name)?;
    ns.apply(&sample_cloneset("sd", 3, &image("v1"), "InPlaceIfPossible"))?;
    wait_rolled_out(&ns, "sd", 3, ROLLOUT)?;
    let uids = ns.live_pod_uids()?;
    let names: Vec<&String> = uids.keys().collect();
    assert_eq!(names.len(), 3);
    // A pod of the namespace that the CloneSet does not own (never scheduled).
    ns.apply(
        "apiVersion: v1
kind: Pod
metadata: {name: stranger}
spec:
  nodeSelector: {inplace.testbed/none: 'true'}
  containers: [{name: app, image: 127.0.0.1:5000/inplace-test/app:v1}]
",
    )?;

    let pods = format!("{},stranger,ghost", names[0]);
    let (code, _, err) = plugin_in(&ns, &["scale-down", "sd", "--pods", &pods]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("pod stranger, ghost not owned by cloneset sd"),
        "{err}"
    );
    assert_eq!(ns.cloneset("sd")?["spec"]["replicas"], 3);

    let pods = format!("{}, {}", names[0], names[1]);
    let (code, out, err) = plugin_in(
        &ns,
        &["scale-down", "cloneset/sd", "--pods", &pods, "-o", "json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let after: Value = serde_json::from_str(&out)?;
    assert_eq!(after["spec"]["replicas"], 1);
    assert_eq!(
        after["spec"]["scaleStrategy"]["podsToDelete"],
        json!([names[0], names[1]])
    );
    wait_rolled_out(&ns, "sd", 1, ROLLOUT)?;
    let left = ns.live_pod_uids()?;
    let kept: Vec<&String> = left.keys().filter(|n| *n != "stranger").collect();
    assert_eq!(kept, [names[2]], "{left:?}");
    assert_eq!(left.get(names[2]), uids.get(names[2]));
    assert!(left.contains_key("stranger"));
    Ok(())
}

/// A three-pod CloneSet of two containers (`first` on :8080, `second` on :8081), in place,
/// at most one pod unavailable.
fn two_container_demo(name: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: {name}
spec:
  replicas: 3
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      nodeSelector:
        inplace.testbed/real: "true"
      terminationGracePeriodSeconds: 2
      containers:
      - name: first
        image: {image}
        env: [{{name: PORT, value: "8080"}}]
        readinessProbe:
          httpGet: {{path: /version, port: 8080}}
          periodSeconds: 1
      - name: second
        image: {image}
        env: [{{name: PORT, value: "8081"}}]
        readinessProbe:
          httpGet: {{path: /version, port: 8081}}
          periodSeconds: 1
  updateStrategy:
    type: InPlaceIfPossible
    maxUnavailable: 1
"#
    )
}

/// Per pod name: (uid, pod IP, restart count per container).
type PodIdentity = (String, String, std::collections::BTreeMap<String, i64>);

fn identities(ns: &Namespace) -> TestResult<std::collections::BTreeMap<String, PodIdentity>> {
    let mut out = std::collections::BTreeMap::new();
    for (name, pod) in ns.pods()? {
        if e2e_support::pod_terminating(&pod) {
            continue;
        }
        let restarts = pod["status"]["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_owned(),
                    c["restartCount"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let ip = pod["status"]["podIP"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        out.insert(name, (uid, ip, restarts));
    }
    Ok(out)
}

/// `rollout restart` restarts every container of every pod in place: the same pods (UID
/// and IP), each container's restartCount up by one, the CloneSet updated and ready, and
/// never more than maxUnavailable (1) pods unready meanwhile (sampled at every pod event).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn rollout_restart_restarts_every_container_in_place() -> TestResult {
    let ns = Namespace::create("plugin-restart")?;
    let _daemon = e2e_support::Daemon::start()?;
    let ctl = Controller::start(&ns.name)?;
    ns.apply(&two_container_demo("rr", &image("v1")))?;
    wait_rolled_out(&ns, "rr", 3, ROLLOUT)?;
    let before = identities(&ns)?;
    assert_eq!(before.len(), 3, "{before:?}");
    let revision_before = ns.cloneset("rr")?["status"]["updateRevision"].clone();
    let watch = e2e_support::UnavailabilityWatch::start(&ns.name, 3).await?;

    let (code, out, err) = plugin_in(&ns, &["rollout", "restart", "cloneset/rr"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "cloneset.apps.kruise.io/rr restarted\n");
    let cs = ns.cloneset("rr")?;
    let at = cs["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
        .as_str()
        .ok_or("no restartedAt on the template")?
        .to_owned();

    let done = wait_rolled_out(&ns, "rr", 3, ROLLOUT)
        .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    assert_ne!(
        done["status"]["updateRevision"], revision_before,
        "a new revision"
    );
    assert_eq!(done["status"]["updatedReplicas"], 3);
    assert_eq!(done["status"]["updatedReadyReplicas"], 3);
    let mut after = Default::default();
    wait_for("every container restarted once", ROLLOUT, || {
        after = identities(&ns)?;
        Ok(after.values().all(|(_, _, r)| r.values().all(|n| *n == 1)))
    })
    .map_err(|e| format!("{e}: {after:?}"))?;
    assert_eq!(after.len(), 3, "{after:?}");
    for (name, (uid, ip, restarts)) in &after {
        let (uid0, ip0, restarts0) = before.get(name).ok_or(format!("{name} is a new pod"))?;
        assert_eq!(uid, uid0, "{name} kept its UID");
        assert_eq!(ip, ip0, "{name} kept its IP");
        assert_eq!(restarts0.len(), 2, "{name}: {restarts0:?}");
        for (container, n) in restarts {
            assert_eq!(*n, restarts0[container] + 1, "{name}/{container}");
        }
    }
    for pod in ns.pods()?.values() {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            pod["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"],
            json!(at),
            "{name}"
        );
        assert_eq!(
            e2e_support::label(pod, "lifecycle.apps.kruise.io/state"),
            Some("Normal")
        );
        let state: Value = serde_json::from_str(
            pod["metadata"]["annotations"]["apps.kruise.io/inplace-update-state"]
                .as_str()
                .unwrap_or("null"),
        )?;
        assert_eq!(
            state["restartContainers"],
            json!(["first", "second"]),
            "{name}: {state}"
        );
    }
    assert!(watch.samples() > 0, "the watch saw no pod event");
    assert!(
        watch.max() <= 1,
        "{} pods unavailable at once (maxUnavailable 1): {}",
        watch.max(),
        watch.worst()
    );
    assert_eq!(watch.max_live(), 3, "no pod was added");

    // `get`: the same, per revision and per pod.
    let (code, out, err) = plugin_in(&ns, &["get", "rr", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let view: Value = serde_json::from_str(&out)?;
    let pods = view["pods"].as_array().ok_or("no pods in the view")?;
    assert_eq!(pods.len(), 3, "{view}");
    for p in pods {
        assert_eq!(p["updated"], true, "{p}");
        assert_eq!(p["inPlace"], "done", "{p}");
        assert_eq!(p["ready"], true, "{p}");
        assert_eq!(p["restarts"], 2, "{p}");
        assert_eq!(p["lifecycle"], "Normal", "{p}");
    }
    let revisions = view["revisions"].as_array().ok_or("no revisions")?;
    assert_eq!(revisions.len(), 2, "{view}");
    assert_eq!(revisions[1]["pods"], 3, "{view}");
    assert_eq!(revisions[1]["update"], true, "{view}");
    let (code, table, err) = plugin_in(&ns, &["get", "cloneset/rr"]);
    assert_eq!(code, 0, "{table}{err}");
    assert!(
        table.starts_with(
            "cloneset.apps.kruise.io/rr: replicas 3/3, ready 3, updated 3, updated ready 3\n"
        ),
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("rr-")).count(),
        3,
        "{table}"
    );
    // `--watch` with stdout not a terminal: the first view is printed plainly (no ANSI
    // clear), and the process keeps watching.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .arg("--kubeconfig")
        .arg(e2e_support::kubeconfig())
        .args(["-n", &ns.name, "get", "rr", "--watch"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let mut first = Vec::new();
    while first
        .iter()
        .filter(|l: &&String| l.starts_with("rr-"))
        .count()
        < 3
    {
        match lines.next() {
            Some(line) => first.push(line?),
            None => break,
        }
    }
    let still_running = child.try_wait()?.is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(still_running, "--watch ended: {first:?}");
    let first = first.join("\n");
    assert!(first.starts_with("cloneset.apps.kruise.io/rr: "), "{first}");
    assert!(!first.contains('\u{1b}'), "{first}");
    Ok(())
}

/// `plan NAME` prints exactly what the offline plan prints from the same objects dumped
/// with kubectl (CloneSet, pods, ControllerRevisions, PVCs), as a table and as JSON. The
/// controller is stopped after the first rollout and the image changed, so the plan is not
/// empty: every pod is to be updated in place (within maxUnavailable).
///
/// Host process: stops the controller after the first rollout so that the objects stay as
/// they are while the two plans are made; the installed one cannot be stopped without
/// changing the installation.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_live_plan_is_the_offline_plan_of_the_same_objects() -> TestResult {
    let ns = Namespace::create("plugin-plan")?;
    let mut ctl = Controller::host(&ns.name, &[])?;
    ns.apply(&sample_cloneset("lp", 3, &image("v1"), "InPlaceIfPossible"))?;
    wait_rolled_out(&ns, "lp", 3, ROLLOUT)?;
    ctl.kill();
    ns.set_image("lp", &image("v2"))?;

    let dir = tempfile::tempdir()?;
    let dump = |file: &str, args: &[&str]| -> TestResult<String> {
        let path = dir.path().join(file);
        std::fs::write(&path, ns.kubectl(args)?)?;
        Ok(path.display().to_string())
    };
    let cs = dump("cs.yaml", &["get", "cloneset", "lp", "-o", "yaml"])?;
    let pods = dump("pods.yaml", &["get", "pods", "-l", "app=lp", "-o", "yaml"])?;
    let revs = dump("revs.yaml", &["get", "controllerrevisions", "-o", "yaml"])?;
    let pvcs = dump("pvcs.yaml", &["get", "pvc", "-o", "yaml"])?;
    let now = "2030-01-01T00:00:00Z";
    for format in ["table", "json"] {
        let (code, live, err) =
            plugin_in(&ns, &["plan", "cloneset/lp", "--now", now, "-o", format]);
        assert_eq!(code, 0, "{live}{err}");
        let (code, offline, err) = plugin_in(
            &ns,
            &[
                "plan",
                "-f",
                &cs,
                "--pods",
                &pods,
                "--revisions",
                &revs,
                "--pvcs",
                &pvcs,
                "--now",
                now,
                "-o",
                format,
            ],
        );
        assert_eq!(code, 0, "{offline}{err}");
        assert_eq!(live, offline, "{format}");
    }
    let (_, live, _) = plugin_in(&ns, &["plan", "lp", "--now", now, "-o", "json"]);
    let plan: Value = serde_json::from_str(&live)?;
    let updates: Vec<&Value> = plan["actions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.get("update"))
        .collect();
    assert!(!updates.is_empty(), "{plan}");
    assert!(updates.iter().all(|u| u["method"] == "inPlace"), "{plan}");
    Ok(())
}

/// `get` and `rollout status` say why a rollout waits: an in-place update to an image that
/// does not exist leaves one pod unable to pull, which spends the budget of maxUnavailable
/// 1; paused, it says so. `get -l` lists the CloneSet with the same reasons.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn get_and_rollout_status_say_why_a_rollout_waits() -> TestResult {
    let ns = Namespace::create("plugin-waits")?;
    let _ctl = Controller::start(&ns.name)?;
    let manifest = sample_cloneset("ww", 2, &image("v1"), "InPlaceIfPossible").replace(
        "    type: InPlaceIfPossible",
        "    type: InPlaceIfPossible\n    maxUnavailable: 1",
    );
    ns.apply(&manifest)?;
    wait_rolled_out(&ns, "ww", 2, ROLLOUT)?;
    let missing = image("v1").replace(":v1", ":no-such-tag");
    let (code, out, err) = plugin_in(&ns, &["set", "image", "ww", &format!("app={missing}")]);
    assert_eq!(code, 0, "{out}{err}");

    let mut view = Value::Null;
    wait_for("get ww to say why the rollout waits", ROLLOUT, || {
        let (code, out, err) = plugin_in(&ns, &["get", "ww", "-o", "json"]);
        if code != 0 {
            return Err(format!("get: exit {code}: {err}").into());
        }
        view = serde_json::from_str(&out)?;
        let waiting = view["waiting"].as_array().cloned().unwrap_or_default();
        let budget = waiting
            .iter()
            .any(|w| w["reason"] == "maxUnavailable" && w["unavailable"] == 1 && w["allowed"] == 1);
        let pulling = waiting.iter().any(|w| {
            w["reason"] == "pod"
                && w["why"]
                    .as_str()
                    .is_some_and(|s| s.contains("ErrImagePull") || s.contains("ImagePullBackOff"))
        });
        Ok(budget && pulling)
    })
    .map_err(|e| format!("{e}: last view {view}"))?;

    let (code, table, err) = plugin_in(&ns, &["get", "ww"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("\nwaiting: maxUnavailable reached: 1 unavailable of 1 allowed\n"),
        "{table}"
    );
    assert!(table.contains("\nwaiting: pod ww-"), "{table}");

    let (code, list, err) = plugin_in(&ns, &["get", "-l", "app=ww"]);
    assert_eq!(code, 0, "{err}");
    assert!(list.starts_with("NAME  "), "{list}");
    assert!(
        list.contains("maxUnavailable reached: 1 unavailable of 1 allowed"),
        "{list}"
    );
    let (code, list, _) = plugin_in(&ns, &["get", "-l", "app=nothing"]);
    assert_eq!(code, 0);
    assert_eq!(
        list,
        format!("No resources found in {} namespace.\n", ns.name)
    );
    let (code, _, err) = plugin_in(&ns, &["get", "ww", "-A"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("across all namespaces"), "{err}");

    let (code, out, err) = plugin_in(&ns, &["rollout", "status", "ww", "--timeout", "5s"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("waiting: maxUnavailable reached: 1 unavailable of 1 allowed"),
        "{out}"
    );
    assert!(out.contains("waiting: pod ww-"), "{out}");
    assert!(err.contains("timed out after 5s"), "{err}");

    let (code, _, err) = plugin_in(&ns, &["rollout", "pause", "ww"]);
    assert_eq!(code, 0, "{err}");
    wait_for("get ww to say paused", Duration::from_secs(30), || {
        let (_, out, _) = plugin_in(&ns, &["get", "ww"]);
        Ok(out.contains("\nwaiting: paused: 1 pod(s) left to update"))
    })?;
    Ok(())
}

/// `-l SELECTOR` on `rollout` and `set image`: every matching CloneSet in name order, the
/// others untouched; `rollout status -l` waits for each; a selector matching nothing is
/// said or not as kubectl 1.33 does (exit 0); a name with `-l` and a bad selector are bad
/// input. Completion offers the namespace's CloneSet names.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn rollout_and_set_image_act_on_every_cloneset_a_selector_matches() -> TestResult {
    let ns = Namespace::create("plugin-select")?;
    let _ctl = Controller::start(&ns.name)?;
    let (v1, v2) = (image("v1"), image("v2"));
    let labelled = |name: &str, tier: &str| {
        sample_cloneset(name, 1, &v1, "InPlaceIfPossible").replace(
            "  labels:\n    app: {name}\n  name:"
                .replace("{name}", name)
                .as_str(),
            &format!("  labels:\n    app: {name}\n    tier: {tier}\n  name:"),
        )
    };
    // Applied out of name order; "sc" is of another tier.
    for (name, tier) in [("sb", "front"), ("sc", "back"), ("sa", "front")] {
        let manifest = labelled(name, tier);
        assert!(manifest.contains("tier: "), "{manifest}");
        ns.apply(&manifest)?;
    }
    for name in ["sa", "sb", "sc"] {
        wait_rolled_out(&ns, name, 1, ROLLOUT)?;
    }

    let (code, out, err) = plugin_in(&ns, &["rollout", "pause", "-l", "tier=front"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "cloneset.apps.kruise.io/sa paused\ncloneset.apps.kruise.io/sb paused\n"
    );
    assert_eq!(
        (paused(&ns, "sa"), paused(&ns, "sb"), paused(&ns, "sc")),
        (json!(true), json!(true), Value::Null)
    );
    let (code, out, err) = plugin_in(
        &ns,
        &[
            "rollout",
            "resume",
            "--selector",
            "tier=front",
            "-o",
            "yaml",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let docs: Vec<&str> = out.split("\n---\n").collect();
    assert_eq!(docs.len(), 2, "{out}");
    assert!(docs[0].contains("name: sa\n"), "{out}");
    assert!(docs[1].contains("name: sb\n"), "{out}");
    assert_eq!(
        (paused(&ns, "sa"), paused(&ns, "sb")),
        (json!(false), json!(false))
    );

    let uids = ns.live_pod_uids()?;
    let set = format!("app={v2}");
    let (code, out, err) = plugin_in(&ns, &["set", "image", "-l", "tier=front", &set]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "cloneset.apps.kruise.io/sa image updated\ncloneset.apps.kruise.io/sb image updated\n"
    );
    let (code, out, err) = plugin_in(
        &ns,
        &["rollout", "status", "-l", "tier=front", "--timeout", "150s"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (a, b) = (
        out.find("cloneset sa successfully rolled out"),
        out.find("cloneset sb successfully rolled out"),
    );
    assert!(a.is_some() && b.is_some() && a < b, "{out}");
    assert_eq!(ns.live_pod_uids()?, uids, "set image recreated pods");
    for (name, pod) in ns.pods()? {
        let want = if name.starts_with("sc-") { &v1 } else { &v2 };
        assert_eq!(&container_image(&pod), want, "{name}");
    }

    let (code, out, err) = plugin_in(
        &ns,
        &["rollout", "history", "-l", "tier=front", "-o", "json"],
    );
    assert_eq!(code, 0, "{err}");
    let histories: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()?;
    assert_eq!(histories.len(), 2, "{out}");
    for h in &histories {
        assert_eq!(h.as_array().map(Vec::len), Some(2), "{h}");
    }
    let (code, out, err) = plugin_in(&ns, &["rollout", "undo", "-l", "tier=front"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "cloneset.apps.kruise.io/sa rolled back to revision 1\ncloneset.apps.kruise.io/sb rolled back to revision 1\n"
    );
    for name in ["sa", "sb"] {
        assert_eq!(
            ns.cloneset(name)?["spec"]["template"]["spec"]["containers"][0]["image"],
            json!(v1),
            "{name}"
        );
    }

    // Nothing matches: rollout status|pause|resume|restart say so, the others say nothing.
    let none = format!("No resources found in {} namespace.\n", ns.name);
    for sub in ["status", "pause", "resume", "restart"] {
        let (code, out, err) = plugin_in(&ns, &["rollout", sub, "-l", "tier=none"]);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (0, "", none.as_str()),
            "{sub}"
        );
    }
    for args in [
        &["rollout", "history", "-l", "tier=none"][..],
        &["rollout", "undo", "-l", "tier=none"][..],
        &["set", "image", "-l", "tier=none", "app=x:1"][..],
    ] {
        let (code, out, err) = plugin_in(&ns, args);
        assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""), "{args:?}");
    }
    // `kubectl inplace -n NS rollout status s<TAB>`: kubectl_complete-inplace runs this.
    let complete = Command::new(env!("CARGO_BIN_EXE_kubectl-inplace"))
        .args(["__complete", "--kubeconfig"])
        .arg(e2e_support::kubeconfig())
        .args(["-n", ns.name.as_str(), "rollout", "status", "s"])
        .stdin(Stdio::null())
        .output()?;
    assert_eq!(text(&complete).0, "sa\nsb\nsc\n:4\n");

    let (code, _, err) = plugin_in(&ns, &["rollout", "pause", "sa", "-l", "tier=front"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("name cannot be provided when a selector is specified"),
        "{err}"
    );
    let (code, _, err) = plugin_in(&ns, &["rollout", "pause", "-l", "tier front"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("tier front"), "{err}");
    assert_eq!(paused(&ns, "sa"), json!(false));
    Ok(())
}
