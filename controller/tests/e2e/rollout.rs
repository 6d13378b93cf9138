//! End-to-end, rollouts: maxSurge, paused, lifecycle hooks, PVCs, progress deadline, and a
//! controller killed in the middle of a rollout. Same bed and commands as `cloneset`:
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored --test-threads 2 rollout::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::collections::BTreeMap;
use std::time::Duration;

use e2e_support::*;
use inplace_testkit::freezable_proxy::Hold;
use serde_json::{Value, json};

const ROLLOUT: Duration = Duration::from_secs(150);

fn live_pods(ns: &Namespace) -> TestResult<BTreeMap<String, Value>> {
    Ok(ns
        .pods()?
        .into_iter()
        .filter(|(_, p)| !pod_terminating(p))
        .collect())
}

fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn max_surge_creates_extra_new_pods_and_removes_them_at_the_end() -> TestResult {
    let ns = Namespace::create("surge")?;
    let _ctl = Controller::start(&ns.name)?;
    ns.apply(&sample_cloneset("sg", 3, &image("v1"), "ReCreate"))?;
    wait_rolled_out(&ns, "sg", 3, ROLLOUT)?;
    let watch = UnavailabilityWatch::start(&ns.name, 3).await?;
    ns.patch_cloneset(
        "sg",
        &json!({"spec": {"updateStrategy": {"maxSurge": 1, "maxUnavailable": 0}}}),
    )?;
    ns.set_image("sg", &image("v2"))?;
    wait_rolled_out(&ns, "sg", 3, ROLLOUT)?;
    wait_for("surge pods removed", ROLLOUT, || {
        Ok(live_pods(&ns)?.len() == 3)
    })?;
    eprintln!(
        "surge rollout: at most {} live pods, at most {} unavailable",
        watch.max_live(),
        watch.max()
    );
    assert_eq!(watch.max_live(), 4, "exactly one surge pod at a time");
    assert_eq!(watch.max(), 0, "maxUnavailable 0 holds: {}", watch.worst());
    for pod in live_pods(&ns)?.values() {
        assert_eq!(container_image(pod), image("v2"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn paused_stops_updating_and_resuming_finishes() -> TestResult {
    let ns = Namespace::create("paused")?;
    let _ctl = Controller::start(&ns.name)?;
    ns.apply(&sample_cloneset("ps", 3, &image("v1"), "InPlaceIfPossible"))?;
    wait_rolled_out(&ns, "ps", 3, ROLLOUT)?;
    ns.patch_cloneset("ps", &json!({"spec": {"updateStrategy": {"paused": true}}}))?;
    ns.set_image("ps", &image("v2"))?;
    wait_for("status observes the new revision", ROLLOUT, || {
        let cs = ns.cloneset("ps")?;
        Ok(cs["status"]["observedGeneration"] == cs["metadata"]["generation"])
    })?;
    std::thread::sleep(Duration::from_secs(6));
    let cs = ns.cloneset("ps")?;
    assert_eq!(
        status_i64(&cs, "updatedReplicas"),
        0,
        "paused: nothing updated"
    );
    for pod in live_pods(&ns)?.values() {
        assert_eq!(container_image(pod), image("v1"));
    }
    // Scaling still works while paused.
    ns.patch_cloneset("ps", &json!({"spec": {"replicas": 4}}))?;
    wait_for("4 pods while paused", ROLLOUT, || {
        Ok(live_pods(&ns)?.len() == 4)
    })?;
    ns.patch_cloneset(
        "ps",
        &json!({"spec": {"updateStrategy": {"paused": false}}}),
    )?;
    wait_rolled_out(&ns, "ps", 4, ROLLOUT)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn killing_the_controller_mid_rollout_resumes_without_loss_or_overrun() -> TestResult {
    let ns = Namespace::create("restart")?;
    let mut ctl = Controller::start_alone(&ns.name)?;
    // minReadySeconds slows every batch down so that the kill lands mid-rollout.
    let yaml = sample_cloneset("rs", 5, &image("v1"), "InPlaceIfPossible").replace(
        "  updateStrategy:",
        "  minReadySeconds: 4\n  updateStrategy:",
    );
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, "rs", 5, ROLLOUT)?;
    wait_for("all available", ROLLOUT, || {
        Ok(status_i64(&ns.cloneset("rs")?, "availableReplicas") == 5)
    })?;
    let before: BTreeMap<String, (String, i64)> = live_pods(&ns)?
        .into_iter()
        .map(|(n, p)| (n, (uid(&p), restart_count(&p))))
        .collect();
    let watch = UnavailabilityWatch::start(&ns.name, 5).await?;
    ns.set_image("rs", &image("v2"))?;
    wait_for("the rollout under way", ROLLOUT, || {
        let n = status_i64(&ns.cloneset("rs")?, "updatedReplicas");
        Ok((1..5).contains(&n))
    })?;
    ctl.kill();
    let at_kill = status_i64(&ns.cloneset("rs")?, "updatedReplicas");
    eprintln!("controller killed with {at_kill}/5 updated");
    // The restart must find the state the kill left once the node has acted on it: every
    // pod whose spec the dead controller already patched has its new container running
    // and ready (restarted once), with nobody left to mark the update complete.
    wait_for(
        "the kubelet finished the restarts begun before the kill",
        ROLLOUT,
        || {
            Ok(live_pods(&ns)?.iter().all(|(name, p)| {
                container_image(p) != image("v2")
                    || (before.get(name).map(|b| b.1 + 1) == Some(restart_count(p))
                        && p["status"]["containerStatuses"][0]["ready"] == true)
            }))
        },
    )?;
    ctl.restart()?;
    wait_rolled_out(&ns, "rs", 5, ROLLOUT)?;
    let after: BTreeMap<String, (String, i64)> = live_pods(&ns)?
        .into_iter()
        .map(|(n, p)| (n, (uid(&p), restart_count(&p))))
        .collect();
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (name, (u, r)) in &before {
        assert_eq!(&after[name].0, u, "{name}: same pod");
        assert_eq!(after[name].1, r + 1, "{name}: updated exactly once");
    }
    eprintln!("restart rollout: at most {} unavailable", watch.max());
    assert!(
        watch.max() <= 1,
        "budget kept across the restart: {}",
        watch.worst()
    );
    Ok(())
}

/// The "hook controller" of an in-place hook on the label `example.io/block`: releases every
/// pod waiting in PreparingUpdate and puts the label back on Updated ones, until `done` holds
/// of the CloneSet `name` and its live pods.
fn rollout_through_the_hook(
    ns: &Namespace,
    name: &str,
    done: impl Fn(&Value, &BTreeMap<String, Value>) -> bool,
) -> TestResult {
    wait_for("rollout through the hook", ROLLOUT, || {
        for (n, p) in live_pods(ns)? {
            match label(&p, "lifecycle.apps.kruise.io/state") {
                Some("PreparingUpdate") if label(&p, "example.io/block").is_some() => {
                    ns.kubectl(&["label", "pod", &n, "example.io/block-"])?;
                }
                Some("Updated") => {
                    ns.kubectl(&["label", "pod", &n, "example.io/block=true", "--overwrite"])?;
                }
                _ => {}
            }
        }
        Ok(done(&ns.cloneset(name)?, &live_pods(ns)?))
    })
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn lifecycle_hooks_hold_pods_until_released() -> TestResult {
    let ns = Namespace::create("hooks")?;
    let _ctl = Controller::start(&ns.name)?;
    let yaml = sample_cloneset("hk", 2, &image("v1"), "InPlaceIfPossible")
        .replace(
            "      labels:\n        app: hk\n    spec:",
            "      labels:\n        app: hk\n        example.io/block: \"true\"\n    spec:",
        )
        .replace(
            "  updateStrategy:",
            "  lifecycle:\n    preDelete:\n      labelsHandler:\n        example.io/block: \"true\"\n    inPlaceUpdate:\n      labelsHandler:\n        example.io/block: \"true\"\n  updateStrategy:",
        );
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, "hk", 2, ROLLOUT)?;

    // In-place update: held in PreparingUpdate while the hook label is on.
    ns.set_image("hk", &image("v2"))?;
    let held = {
        let mut held = String::new();
        wait_for("a pod in PreparingUpdate", ROLLOUT, || {
            for (n, p) in live_pods(&ns)? {
                if label(&p, "lifecycle.apps.kruise.io/state") == Some("PreparingUpdate") {
                    held = n;
                    return Ok(true);
                }
            }
            Ok(false)
        })?;
        held
    };
    std::thread::sleep(Duration::from_secs(4));
    let pods = live_pods(&ns)?;
    assert_eq!(
        label(&pods[&held], "lifecycle.apps.kruise.io/state"),
        Some("PreparingUpdate"),
        "held while hooked"
    );
    assert_eq!(
        container_image(&pods[&held]),
        image("v1"),
        "not updated yet"
    );
    rollout_through_the_hook(&ns, "hk", |cs, pods| {
        status_i64(cs, "updatedReadyReplicas") == 2
            && pods
                .values()
                .all(|p| label(p, "lifecycle.apps.kruise.io/state") == Some("Normal"))
    })?;

    // Scale down: the victim waits in PreparingDelete until the hook label goes.
    ns.patch_cloneset("hk", &json!({"spec": {"replicas": 1}}))?;
    let mut victim = String::new();
    wait_for("a pod in PreparingDelete", ROLLOUT, || {
        for (n, p) in live_pods(&ns)? {
            if label(&p, "lifecycle.apps.kruise.io/state") == Some("PreparingDelete") {
                victim = n;
                return Ok(true);
            }
        }
        Ok(false)
    })?;
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        live_pods(&ns)?.contains_key(&victim),
        "held in PreparingDelete"
    );
    ns.kubectl(&["label", "pod", &victim, "example.io/block-"])?;
    wait_for("the released pod deleted", ROLLOUT, || {
        Ok(!live_pods(&ns)?.contains_key(&victim))
    })?;
    wait_for("1 pod left", ROLLOUT, || Ok(live_pods(&ns)?.len() == 1))?;
    Ok(())
}

/// `markPodNotReady` on the in-place hook: a pod held in PreparingUpdate is not ready
/// through its `KruisePodReady` key, written as OpenKruise writes it
/// (`{userAgent: Lifecycle, key: preUpdateHook}`), and released once the hook lets it go. A
/// pod whose key is in the spelling of our earlier builds (`userAgent:
/// ContainerRecreateRequest`, as on a pod marked before an upgrade) is not marked twice and
/// is released too.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn a_pod_held_not_ready_by_the_in_place_hook_is_released_in_either_spelling() -> TestResult {
    const OURS: &str = r#"[{"userAgent":"Lifecycle","key":"preUpdateHook"}]"#;
    const EARLIER: &str = r#"[{"userAgent":"ContainerRecreateRequest","key":"preUpdateHook"}]"#;
    let ns = Namespace::create("hookspell")?;
    let _ctl = Controller::start(&ns.name)?;
    let client = client().await?;
    let yaml = sample_cloneset("hs", 2, &image("v1"), "InPlaceIfPossible")
        .replace(
            "      labels:\n        app: hs\n    spec:",
            "      labels:\n        app: hs\n        example.io/block: \"true\"\n    spec:",
        )
        .replace(
            "  updateStrategy:\n    type: InPlaceIfPossible\n",
            "  lifecycle:\n    inPlaceUpdate:\n      markPodNotReady: true\n      labelsHandler:\n        example.io/block: \"true\"\n  updateStrategy:\n    type: InPlaceIfPossible\n    maxUnavailable: 2\n",
        );
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, "hs", 2, ROLLOUT)?;

    ns.set_image("hs", &image("v2"))?;
    wait_for(
        "both pods in PreparingUpdate, not ready by our key",
        ROLLOUT,
        || {
            let pods = live_pods(&ns)?;
            Ok(pods.len() == 2
                && pods.values().all(|p| {
                    label(p, "lifecycle.apps.kruise.io/state") == Some("PreparingUpdate")
                        && kruise_pod_ready(p) == Some(("False".into(), OURS.into()))
                        && !pod_ready(p)
                }))
        },
    )?;
    let names: Vec<String> = live_pods(&ns)?.into_keys().collect();
    let earlier = &names[1];
    set_pod_conditions(
        &client,
        &ns.name,
        earlier,
        json!([{"type": "KruisePodReady", "status": "False", "message": EARLIER}]),
    )
    .await?;
    std::thread::sleep(Duration::from_secs(3));
    let pods = live_pods(&ns)?;
    assert_eq!(
        kruise_pod_ready(&pods[earlier]),
        Some(("False".into(), EARLIER.into())),
        "a key in the earlier spelling is not added again in ours"
    );
    for p in pods.values() {
        assert_eq!(container_image(p), image("v1"), "held while hooked");
    }

    rollout_through_the_hook(&ns, "hs", |cs, _| {
        status_i64(cs, "updatedReadyReplicas") == 2
    })?;
    for (n, p) in live_pods(&ns)? {
        assert_eq!(container_image(&p), image("v2"), "{n} updated");
        assert_eq!(
            kruise_pod_ready(&p).map(|(s, m)| (s, m.is_empty())),
            Some(("True".into(), true)),
            "{n}: no key left"
        );
        assert!(pod_ready(&p), "{n} ready");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn progress_deadline_flips_progressing_false() -> TestResult {
    let ns = Namespace::create("deadline")?;
    let _ctl = Controller::start(&ns.name)?;
    let yaml = sample_cloneset("dl", 2, &image("v1"), "ReCreate").replace(
        "  updateStrategy:",
        "  progressDeadlineSeconds: 8\n  updateStrategy:",
    );
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, "dl", 2, ROLLOUT)?;
    wait_for("Progressing True", ROLLOUT, || {
        let cs = ns.cloneset("dl")?;
        Ok(cs["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Progressing" && c["status"] == "True")
        }))
    })?;
    // An image that cannot be pulled never becomes ready.
    ns.set_image("dl", "127.0.0.1:5000/inplace-test/app:does-not-exist")?;
    wait_for(
        "Progressing False / ProgressDeadlineExceeded",
        ROLLOUT,
        || {
            let cs = ns.cloneset("dl")?;
            Ok(cs["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "Progressing"
                        && c["status"] == "False"
                        && c["reason"] == "ProgressDeadlineExceeded"
                })
            }))
        },
    )?;
    Ok(())
}

/// hostPath PersistentVolumes for the test's claims (the bed has no provisioner).
pub(crate) fn make_pvs(prefix: &str, n: usize) -> TestResult<Vec<String>> {
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-pv{i}");
        let yaml = format!(
            r#"apiVersion: v1
kind: PersistentVolume
metadata:
  name: {name}
spec:
  capacity:
    storage: 1Gi
  accessModes: ["ReadWriteOnce"]
  persistentVolumeReclaimPolicy: Delete
  storageClassName: {prefix}
  hostPath:
    path: /tmp/inplace-e2e/{name}
    type: DirectoryOrCreate
"#
        );
        kubectl(&["apply", "-f", "-"], Some(&yaml))?;
        names.push(name);
    }
    Ok(names)
}

pub(crate) struct Pvs(pub(crate) Vec<String>);

impl Drop for Pvs {
    fn drop(&mut self) {
        for pv in &self.0 {
            let _ = kubectl(&["delete", "pv", pv, "--wait=false"], None);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn pvcs_follow_their_pods() -> TestResult {
    let ns = Namespace::create("pvc")?;
    let class = ns.name.clone();
    let _pvs = Pvs(make_pvs(&class, 8)?);
    let _ctl = Controller::start(&ns.name)?;
    let yaml = with_claims(
        &sample_cloneset("pv", 2, &image("v1"), "InPlaceIfPossible"),
        &class,
        "",
    );
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, "pv", 2, ROLLOUT)?;
    let pvcs = |ns: &Namespace| -> TestResult<BTreeMap<String, String>> {
        Ok(ns.json(&["get", "pvc"])?["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| {
                (
                    p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    uid(p),
                )
            })
            .collect())
    };
    let first = pvcs(&ns)?;
    assert_eq!(first.len(), 2, "one PVC per pod");
    for (name, pod) in live_pods(&ns)? {
        let id = label(&pod, "apps.kruise.io/cloneset-instance-id").unwrap();
        assert!(
            first.contains_key(&format!("data-pv-{id}")),
            "{name}: PVC data-pv-{id}"
        );
    }

    // In-place update keeps the PVCs.
    ns.set_image("pv", &image("v2"))?;
    wait_rolled_out(&ns, "pv", 2, ROLLOUT)?;
    assert_eq!(pvcs(&ns)?, first, "PVCs kept through the in-place update");

    // A pod deleted by hand comes back with the same instance id and PVC.
    let (victim, pod) = live_pods(&ns)?.into_iter().next().unwrap();
    let id = label(&pod, "apps.kruise.io/cloneset-instance-id")
        .unwrap()
        .to_owned();
    let victim_uid = uid(&pod);
    ns.kubectl(&["delete", "pod", &victim, "--wait=false"])?;
    wait_for("the replacement reusing the PVC", ROLLOUT, || {
        Ok(live_pods(&ns)?
            .get(&victim)
            .is_some_and(|p| uid(p) != victim_uid && pod_ready(p)))
    })?;
    let replaced = live_pods(&ns)?;
    assert_eq!(
        label(&replaced[&victim], "apps.kruise.io/cloneset-instance-id"),
        Some(id.as_str())
    );
    assert_eq!(pvcs(&ns)?, first, "the PVC was reused");

    // Scale down deletes the pod's PVC.
    ns.patch_cloneset("pv", &json!({"spec": {"replicas": 1}}))?;
    wait_for("one pod and one PVC", ROLLOUT, || {
        Ok(live_pods(&ns)?.len() == 1 && pvcs(&ns)?.len() == 1)
    })?;

    // A recreate update deletes the pod's PVC with it: the new pod gets a new one.
    let kept = pvcs(&ns)?;
    ns.patch_cloneset(
        "pv",
        &json!({"spec": {"updateStrategy": {"type": "ReCreate"}}}),
    )?;
    ns.set_image("pv", &image("v3"))?;
    wait_rolled_out(&ns, "pv", 1, ROLLOUT)?;
    wait_for("a fresh PVC for the recreated pod", ROLLOUT, || {
        let now = pvcs(&ns)?;
        Ok(now.len() == 1 && now.values().all(|u| !kept.values().any(|k| k == u)))
    })?;
    Ok(())
}

/// Host process: two controllers of its own with --lease-duration 6, the leader killed with
/// SIGKILL (no graceful release of the lease) and each one's log read to tell who leads;
/// the installed Deployment's replicas use 15 s and a deleted pod releases its lease.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_two_controllers_elect_one_leader_and_fail_over() -> TestResult {
    let ns = Namespace::create("leader")?;
    let mut a = Controller::host(&ns.name, &[])?;
    std::thread::sleep(Duration::from_secs(2));
    let mut b = Controller::host(&ns.name, &[])?;
    ns.apply(&sample_cloneset("ld", 2, &image("v1"), "ReCreate"))?;
    wait_rolled_out(&ns, "ld", 2, ROLLOUT)?;
    let leaders = |a: &Controller, b: &Controller| {
        [a, b]
            .iter()
            .filter(|c| c.log_text().contains("became leader"))
            .count()
    };
    assert_eq!(leaders(&a, &b), 1, "exactly one leader");
    let a_leads = a.log_text().contains("became leader");
    // Kill the leader (no lease release): the other takes over after the lease expires.
    if a_leads {
        a.kill();
    } else {
        b.kill();
    }
    let survivor = if a_leads { &mut b } else { &mut a };
    wait_for("the follower takes over", Duration::from_secs(60), || {
        Ok(survivor.log_text().contains("became leader"))
    })?;
    ns.patch_cloneset("ld", &json!({"spec": {"replicas": 3}}))?;
    wait_rolled_out(&ns, "ld", 3, ROLLOUT)?;
    assert!(survivor.is_running());
    Ok(())
}

/// Fenced leadership. The leader is cut off from the API server (its connections held
/// open, nothing forwarded) longer than the lease, while it has work due: its pods are
/// Ready and become available `minReadySeconds` later, when it requeues to write the
/// CloneSet status. That write comes after its lease could have passed on, so it is
/// refused locally (fenced) instead of hanging in the cut connection and landing later.
/// The other controller takes over and writes the status; the old leader, reconnected,
/// lands no write and stops once it sees the new holder. No pod is touched.
///
/// Host process: its first controller reaches the API server through a freezable proxy (a
/// fixture the cluster cannot give: the test cuts the leader off).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_a_leader_cut_off_longer_than_its_lease_writes_nothing_after_it() -> TestResult {
    let ns = Namespace::create("fence")?;
    let (proxy, mut old, new) = proxied_leader_and_standby(&ns).await?;
    let manifest = sample_cloneset("fc", 2, &image("v1"), "ReCreate").replace(
        "spec:\n  replicas:",
        "spec:\n  minReadySeconds: 12\n  replicas:",
    );
    ns.apply(&manifest)?;
    wait_for("2 pods Ready, not yet available", ROLLOUT, || {
        let cs = ns.cloneset("fc")?;
        Ok(status_i64(&cs, "readyReplicas") == 2)
    })
    .map_err(|e| format!("{e}\n{}", old.log_excerpt()))?;
    // The API server answers the status write before the leader logs it: freezing the
    // moment the status reads ready=2 could hold that answer in the proxy and log the
    // write after the mark, as if it landed late. So cut the leader off only once it has
    // logged that write and is idle (its log still for a while): nothing is in flight.
    wait_for(
        "the leader logged the ready=2 status write and is idle",
        Duration::from_secs(30),
        || {
            let before = old.log_text();
            let logged = before
                .lines()
                .any(|l| l.contains("status written") && l.contains(" ready=2 "));
            std::thread::sleep(Duration::from_millis(800));
            Ok(logged && old.log_text().len() == before.len())
        },
    )
    .map_err(|e| format!("{e}\n{}", old.log_excerpt()))?;
    let mark = old.log_text().len();
    proxy.freeze();
    let pods_before = live_pods(&ns)?;
    wait_for(
        "the other controller takes over",
        Duration::from_secs(60),
        || Ok(new.log_text().contains("became leader")),
    )?;
    wait_for("2 pods available", ROLLOUT, || {
        Ok(status_i64(&ns.cloneset("fc")?, "availableReplicas") == 2)
    })
    .map_err(|e| format!("{e}\n{}", new.log_excerpt()))?;
    wait_for(
        "the cut-off leader's status write refused",
        Duration::from_secs(30),
        || Ok(old.log_text()[mark..].contains("refusing every write")),
    )
    .map_err(|e| format!("{e}\n{}", old.log_excerpt()))?;

    let after = thaw_and_see_it_stop(&proxy, &mut old, mark)?;
    // Lines the controller logs only once a write succeeded.
    for landed in [
        "created ControllerRevision",
        "event reason=",
        "status written",
        "lifecycle state changed",
    ] {
        let line = after.lines().find(|l| l.contains(landed));
        assert!(
            line.is_none(),
            "a write of the cut-off leader landed: {line:?}"
        );
    }
    eprintln!(
        "writes of the cut-off leader refused: {}",
        after.matches("refused: the leader lease").count()
    );
    let pods_after = live_pods(&ns)?;
    assert_eq!(
        pods_after.keys().collect::<Vec<_>>(),
        pods_before.keys().collect::<Vec<_>>()
    );
    for (name, pod) in &pods_after {
        assert_eq!(uid(pod), uid(&pods_before[name]), "{name} recreated");
    }
    Ok(())
}

/// Two host controllers of `ns`: the first reaches the API server through a freezable proxy
/// and leads; the second stands by to take over.
async fn proxied_leader_and_standby(
    ns: &Namespace,
) -> TestResult<(FreezableProxy, Controller, Controller)> {
    let proxy = freezable_proxy().await?;
    let old = Controller::host_through(&ns.name, proxy.kubeconfig(), &[])?;
    wait_for(
        "the proxied controller leads",
        Duration::from_secs(60),
        || Ok(old.log_text().contains("became leader")),
    )?;
    let new = Controller::host(&ns.name, &[])?;
    Ok((proxy, old, new))
}

/// Thaws the proxy of the deposed leader `old` and waits until it sees the new holder and
/// stops; returns what it logged after `mark`.
fn thaw_and_see_it_stop(
    proxy: &FreezableProxy,
    old: &mut Controller,
    mark: usize,
) -> TestResult<String> {
    proxy.thaw();
    wait_for(
        "the old leader sees the new holder and stops",
        Duration::from_secs(60),
        || Ok(!old.is_running()),
    )
    .map_err(|e| format!("{e}\n{}", old.log_excerpt()))?;
    let after = old.log_text().get(mark..).unwrap_or_default().to_owned();
    assert!(after.contains("leader lease lost"), "{}", old.log_excerpt());
    Ok(after)
}

/// An RFC 3339 time of an object (`creationTimestamp`, a Lease's `acquireTime`).
fn time_at(value: &Value, what: &str) -> TestResult<chrono::DateTime<chrono::Utc>> {
    let text = value.as_str().ok_or_else(|| format!("no {what}"))?;
    Ok(chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| format!("{what} {text:?}: {e}"))?
        .with_timezone(&chrono::Utc))
}

/// Fenced leadership, a leader frozen in the middle of a write: its first pod create,
/// held as `hold` says. Returns nothing; asserts what both modes share and what each
/// guarantees about the frozen create (see the two tests below).
async fn leader_frozen_mid_create(hold: Hold) -> TestResult {
    let ns = Namespace::create("midwrite")?;
    let (proxy, mut old, new) = proxied_leader_and_standby(&ns).await?;
    let creates = format!("POST /api/v1/namespaces/{}/pods", ns.name);
    proxy.freeze_at(
        hold,
        Box::new(move |line| {
            line.strip_prefix(&creates)
                .is_some_and(|rest| rest.starts_with(['?', ' ']))
        }),
    );
    ns.apply(&sample_cloneset("mw", 2, &image("v1"), "ReCreate"))?;
    wait_for(
        "the leader's first pod create in flight",
        Duration::from_secs(60),
        || Ok(proxy.frozen_on().is_some()),
    )
    .map_err(|e| format!("{e}\n{}", old.log_excerpt()))?;
    let frozen = proxy.frozen_on().ok_or("no frozen request")?;
    let mark = old.log_text().len();
    let body = frozen
        .request
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .unwrap_or_default();
    let sent: Value = serde_json::from_str(body)
        .map_err(|e| format!("the frozen create's body ({e}): {:?}", frozen.request))?;
    let frozen_pod = sent["metadata"]["name"]
        .as_str()
        .ok_or("the frozen create names no pod")?
        .to_owned();
    eprintln!(
        "frozen ({hold:?} held) on {} ({frozen_pod})",
        frozen.request_line
    );

    wait_for(
        "the leader abandons the unanswered create at the end of its validity",
        Duration::from_secs(30),
        || Ok(old.log_text()[mark..].contains("write abandoned: no answer within")),
    )
    .map_err(|e| format!("{e}\n{}", old.log_excerpt()))?;
    wait_for(
        "the other controller takes over",
        Duration::from_secs(60),
        || Ok(new.log_text().contains("became leader")),
    )?;
    let lease = ns.json(&["get", "lease", "inplace-controller"])?;
    let takeover = time_at(&lease["spec"]["acquireTime"], "the Lease's acquireTime")?;
    wait_for("2 pods, the CloneSet's status says so", ROLLOUT, || {
        let cs = ns.cloneset("mw")?;
        Ok(live_pods(&ns)?.len() == 2 && status_i64(&cs, "replicas") == 2)
    })
    .map_err(|e| format!("{e}\n{}", new.log_excerpt()))?;
    let pods_before = live_pods(&ns)?;

    let after = thaw_and_see_it_stop(&proxy, &mut old, mark)?;
    // Lines the controller logs only once a write succeeded.
    for landed in ["created ControllerRevision", "status written"] {
        let line = after.lines().find(|l| l.contains(landed));
        assert!(
            line.is_none(),
            "a write of the frozen leader landed: {line:?}"
        );
    }
    assert!(
        after.contains("event reason=\"FailedCreate\""),
        "the abandoned create is reported: {}",
        old.log_excerpt()
    );
    // Anything the old leader had in flight reaches the server with the thaw; it, and what
    // the new leader does about it, shows within a few seconds.
    std::thread::sleep(Duration::from_secs(5));

    let pods = ns.pods()?;
    let landed = pods
        .get(&frozen_pod)
        .ok_or_else(|| format!("no pod {frozen_pod}, the frozen create's name"))?;
    let created = time_at(
        &landed["metadata"]["creationTimestamp"],
        "the pod's creationTimestamp",
    )?;
    let made_by_new = new
        .log_text()
        .contains(&format!("succeed to create pod {frozen_pod}"));
    match hold {
        // The create reached the server before the freeze: its pod is there from before
        // the takeover (creationTimestamp has whole seconds: it may read up to 1 s early,
        // never late), and the new leader, finding it, did not create it again.
        Hold::Answer => {
            assert!(
                created <= takeover,
                "the frozen create landed at {created}, after the takeover at {takeover}"
            );
            assert!(!made_by_new, "the new leader created {frozen_pod} again");
        }
        // The server saw nothing of the create before the thaw. The new leader plans the
        // same name from the same snapshot (instance ids are deterministic) and creates
        // it; the held create, reaching the server at the thaw, finds the name taken.
        Hold::Request => {
            assert!(
                made_by_new,
                "{frozen_pod} not created by the new leader: {}",
                new.log_excerpt()
            );
        }
    }
    assert_eq!(
        pods.keys().collect::<Vec<_>>(),
        pods_before.keys().collect::<Vec<_>>(),
        "no pod created or deleted after the thaw"
    );
    for (name, pod) in &pods {
        assert!(!pod_terminating(pod), "{name} deleted");
        assert_eq!(uid(pod), uid(&pods_before[name]), "{name} recreated");
    }
    let mut ids: Vec<&str> = pods
        .values()
        .filter_map(|p| label(p, "apps.kruise.io/cloneset-instance-id"))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 2, "each instance id once: {ids:?}");
    // The old leader's FailedCreate event for the abandoned create was refused by the
    // fence, not held to land later.
    let late: Vec<Value> = ns
        .events()?
        .into_iter()
        .filter(|e| e["reason"] == "FailedCreate")
        .collect();
    assert!(
        late.is_empty(),
        "a write of the frozen leader landed: {late:?}"
    );
    let revisions = ns.json(&["get", "controllerrevisions"])?;
    assert_eq!(
        items(&revisions).len(),
        1,
        "one ControllerRevision: {revisions}"
    );
    Ok(())
}

/// Fenced leadership, a leader frozen in the middle of a write. The leader (through a
/// freezable proxy) is frozen the moment it creates its first pod: the create reaches the
/// API server whole, its answer is held. The leader's write carries what remains of its
/// lease's validity as its deadline, so it abandons the create unanswered (it may have
/// landed) instead of waiting out the partition, and writes nothing more (fenced). The
/// other controller takes over, finds the pod the create made and creates only the
/// missing one. Checked: the frozen create landed before the takeover (its pod's
/// creationTimestamp against the Lease's acquireTime), the pod is neither created twice
/// nor replaced, every instance id is used once, no pod is deleted, and the old leader,
/// thawed, lands no write and stops.
///
/// Host process, no node needed (pods stay Pending): its first controller reaches the API
/// server through the proxy.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_a_leader_frozen_with_its_pod_create_unanswered_lands_it_once_before_the_takeover()
-> TestResult {
    leader_frozen_mid_create(Hold::Answer).await
}

/// [`host_a_leader_frozen_with_its_pod_create_unanswered_lands_it_once_before_the_takeover`]
/// with the create itself held before the API server sees it. No deadline covers that (the
/// server's `timeout` counts from when it receives the request), so the create may reach
/// the server at the thaw, after the takeover. What keeps it from making a pod twice is
/// the name: the new leader plans the same instance id from the same snapshot and creates
/// that pod first; a late create finds the name taken. (From a different snapshot, e.g.
/// pods created or deleted meanwhile, the names differ and a late create would add a
/// pod, which the new leader then scales away: creates carry no precondition.) Checked: the new leader created the
/// frozen create's pod, and after the thaw no pod appears, goes or is replaced.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn host_a_leader_frozen_with_its_pod_create_held_never_makes_a_second_pod() -> TestResult {
    leader_frozen_mid_create(Hold::Request).await
}
