//! End-to-end: orphan adoption and release. A CloneSet deleted with `--cascade=orphan`
//! leaves its pods; the same CloneSet applied again adopts them (same UIDs, nothing
//! created). A pod relabelled out of the selector is released and replaced. A CloneSet
//! whose selector its template does not match is refused with `FailedScale`.
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
use serde_json::Value;

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
