//! End-to-end: orphan adoption and release. A CloneSet deleted with `--cascade=orphan`
//! leaves its pods; the same CloneSet applied again adopts them (same UIDs, nothing
//! created). A pod relabelled out of the selector is released and replaced. A CloneSet
//! whose selector its template does not match is refused with `FailedScale`.
//!
//! What is not ours stays untouched, on a server without CEL (the bed's v1.20): a
//! selector changed after creation (with the template's labels, so that the spec itself is
//! consistent) releases no pod and creates none until it is put back; PVCs left by another
//! CloneSet whose labels match this one's selector are never deleted by it, even with
//! `disablePVCReuse`.
//!
//! ```text
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-controller --test e2e -- --ignored adoption::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support as e2e_support;

use std::collections::BTreeSet;
use std::time::Duration;

use e2e_support::*;
use serde_json::{Value, json};

const ROLLOUT: Duration = Duration::from_secs(150);

fn controller_uid(pod: &Value) -> Option<String> {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["controller"] == true)
        .and_then(|o| o["uid"].as_str())
        .map(str::to_owned)
}

fn uids(ns: &Namespace) -> TestResult<BTreeSet<String>> {
    Ok(ns
        .pods()?
        .values()
        .filter(|p| !pod_terminating(p))
        .filter_map(|p| p["metadata"]["uid"].as_str().map(str::to_owned))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn orphans_are_adopted_and_strays_released() -> TestResult {
    let ns = Namespace::create("adopt")?;
    let ctl = Controller::start(&ns.name)?;
    let name = "adopt";
    let yaml = sample_cloneset(name, 2, &image("v1"), "InPlaceIfPossible");
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, name, 2, ROLLOUT)?;
    let before = uids(&ns)?;

    ns.kubectl(&[
        "delete",
        "cloneset",
        name,
        "--cascade=orphan",
        "--wait=true",
    ])?;
    wait_for("pods orphaned", ROLLOUT, || {
        Ok(ns.pods()?.values().all(|p| controller_uid(p).is_none()))
    })?;
    ns.apply(&yaml)?;
    wait_rolled_out(&ns, name, 2, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    let cs_uid = ns.cloneset(name)?["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    wait_for("pods adopted", ROLLOUT, || {
        Ok(ns
            .pods()?
            .values()
            .all(|p| controller_uid(p).as_deref() == Some(cs_uid.as_str())))
    })?;
    assert_eq!(uids(&ns)?, before, "the same pods, none created");

    // Relabel one pod out of the selector: released, and a new pod takes its place.
    let stray = ns.pods()?.keys().next().cloned().ok_or("no pod")?;
    ns.kubectl(&["label", "pod", &stray, "app=moved", "--overwrite"])?;
    wait_for("stray released and replaced", ROLLOUT, || {
        let pods = ns.pods()?;
        let released = pods
            .get(&stray)
            .is_some_and(|p| controller_uid(p).is_none());
        let ours = pods
            .values()
            .filter(|p| controller_uid(p).as_deref() == Some(cs_uid.as_str()))
            .filter(|p| pod_ready(p))
            .count();
        Ok(released && ours == 2)
    })
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn a_selector_outside_the_template_is_refused() -> TestResult {
    let ns = Namespace::create("selmis")?;
    let _ctl = Controller::start(&ns.name)?;
    let yaml = sample_cloneset("selmis", 2, &image("v1"), "InPlaceIfPossible").replacen(
        "    matchLabels:\n      app: selmis",
        "    matchLabels:\n      app: other",
        1,
    );
    ns.apply(&yaml)?;
    wait_for("FailedScale condition", ROLLOUT, || {
        let cs = ns.cloneset("selmis")?;
        Ok(cs["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "FailedScale"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("does not match"))
            }))
    })?;
    assert!(ns.pods()?.is_empty(), "no pod made");
    Ok(())
}

/// The pods of `ns` (name → (UID, controller UID)), terminating ones too.
fn owners(ns: &Namespace) -> TestResult<Vec<(String, String, Option<String>)>> {
    Ok(ns
        .pods()?
        .into_iter()
        .map(|(name, p)| (name, uid(&p), controller_uid(&p)))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn a_selector_changed_after_creation_releases_nothing_until_put_back() -> TestResult {
    let ns = Namespace::create("selchg")?;
    let ctl = Controller::start(&ns.name)?;
    let name = "selchg";
    ns.apply(&sample_cloneset(name, 3, &image("v1"), "ReCreate"))?;
    wait_rolled_out(&ns, name, 3, ROLLOUT)?;
    let cs_uid = uid(&ns.cloneset(name)?);
    let before = owners(&ns)?;
    assert_eq!(before.len(), 3);

    // Selector and template labels changed together: the API server (no CEL) stores it;
    // OpenKruise's webhook refuses it.
    let moved = json!({"spec": {
        "selector": {"matchLabels": {"app": "selchg-moved"}},
        "template": {"metadata": {"labels": {"app": "selchg-moved"}}}}});
    ns.patch_cloneset(name, &moved)?;
    let mut condition = Value::Null;
    wait_for("FailedScale naming spec.selector", ROLLOUT, || {
        condition = failed_scale(&ns.cloneset(name)?).unwrap_or(Value::Null);
        Ok(condition["message"]
            .as_str()
            .is_some_and(|m| m.contains("spec.selector")))
    })
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    wait_for("a Warning event naming spec.selector", ROLLOUT, || {
        Ok(ns.events()?.iter().any(|e| {
            e["type"] == "Warning"
                && (e["involvedObject"]["name"] == name || e["regarding"]["name"] == name)
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.selector"))
        }))
    })?;
    // Watched for a while: every pod stays the CloneSet's, none is made or deleted.
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < until {
        let now = owners(&ns)?;
        assert_eq!(
            now, before,
            "pods released, made or deleted after the refused change"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(
        before
            .iter()
            .all(|(_, _, owner)| owner.as_deref() == Some(cs_uid.as_str())),
        "{before:?}"
    );

    // Put back: acted on again, the condition goes, the same pods.
    let back = json!({"spec": {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}}}});
    ns.patch_cloneset(name, &back)?;
    wait_for("the refusal cleared", ROLLOUT, || {
        Ok(failed_scale(&ns.cloneset(name)?).is_none())
    })
    .map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    wait_rolled_out(&ns, name, 3, ROLLOUT)?;
    assert_eq!(
        owners(&ns)?,
        before,
        "the same pods after the selector was put back"
    );
    Ok(())
}

/// A CloneSet of `replicas` pods labelled and selected by `app: shared`, with a `data`
/// volume claim template of storage class `class` and `extra_spec`.
fn shared_cloneset_with_claims(name: &str, replicas: i32, class: &str, extra_spec: &str) -> String {
    let cs = sample_cloneset(name, replicas, &image("v1"), "InPlaceIfPossible")
        .replace(&format!("app: {name}"), "app: shared");
    with_claims(&cs, class, extra_spec)
}

/// PVC name → UID of the PVCs of `ns` not being deleted.
fn live_pvcs(ns: &Namespace) -> TestResult<std::collections::BTreeMap<String, String>> {
    Ok(items(&ns.json(&["get", "pvc"])?)
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| (name(p), uid(p)))
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the test bed"]
async fn orphaned_pvcs_of_another_cloneset_survive_disable_pvc_reuse() -> TestResult {
    let ns = Namespace::create("pvcown")?;
    let class = ns.name.clone();
    let _pvs = crate::rollout::Pvs(crate::rollout::make_pvs(&class, 4)?);
    let ctl = Controller::start(&ns.name)?;
    ns.apply(&shared_cloneset_with_claims("b", 2, &class, ""))?;
    wait_rolled_out(&ns, "b", 2, ROLLOUT)?;
    let orphaned = live_pvcs(&ns)?;
    assert_eq!(orphaned.len(), 2, "{orphaned:?}");

    // b deleted leaving its pods and PVCs, then its pods removed: the PVCs (user data)
    // are nobody's now, and their labels match any CloneSet selecting app=shared.
    ns.kubectl(&["delete", "cloneset", "b", "--cascade=orphan", "--wait=true"])?;
    wait_for("b's pods and PVCs orphaned", ROLLOUT, || {
        let pods = ns.pods()?;
        let pvcs = items(&ns.json(&["get", "pvc"])?);
        Ok(pods.values().all(|p| controller_uid(p).is_none())
            && pvcs.iter().all(|p| controller_uid(p).is_none()))
    })?;
    ns.kubectl(&["delete", "pods", "-l", "app=shared", "--wait=true"])?;

    // a selects the same labels, with disablePVCReuse.
    ns.apply(&shared_cloneset_with_claims(
        "a",
        1,
        &class,
        "  scaleStrategy:\n    disablePVCReuse: true\n",
    ))?;
    wait_rolled_out(&ns, "a", 1, ROLLOUT).map_err(|e| format!("{e}\n{}", ctl.log_excerpt()))?;
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = live_pvcs(&ns)?;
        for (pvc, pvc_uid) in &orphaned {
            assert_eq!(
                now.get(pvc),
                Some(pvc_uid),
                "b's PVC {pvc} was deleted: {now:?}"
            );
        }
        if std::time::Instant::now() >= until {
            assert_eq!(now.len(), 3, "b's two PVCs and a's own: {now:?}");
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    Ok(())
}
