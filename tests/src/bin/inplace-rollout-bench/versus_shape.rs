//! `--scenario versus-deployment --shape plain|sidecars|pull`: the in-place leg against the
//! Deployment leg on simulated nodes that charge the pod shape's costs measured on the real
//! kubelet (`--calibration FILE`, the `versus-deployment-real[SHAPE] costs: {...}` lines;
//! see `inplace_tests::nodesim::costs`).
//!
//! * `plain`: one container; `sidecars`: an init container, the app and two sidecars
//!   (`mesh`, `log-agent`, the real bench's names), only the app's image changes;
//! * `pull`: one container, one pod per node (required anti-affinity on the host name),
//!   the in-place leg with image pre-download (gate on, parallelism = the pod count), each
//!   leg moving to an image no node holds yet.

use super::*;

const SIDE_IMAGE: &str = "bench.invalid/inplace/side:v1";
/// The Deployment leg's new image: one the in-place leg's pre-download did not pull.
pub(super) const IMAGE_NEW_DEPLOY: &str = "bench.invalid/inplace/app:v3";
const GATE_ON: &str = "--feature-gates=PreDownloadImageForInPlaceUpdate=true";

/// The containers of `shape` with the app on `image` (a JSON list: a merge patch of it
/// replaces the whole list, so the sidecars go with every patch).
pub(super) fn containers(shape: Shape, image: &str) -> serde_json::Value {
    let mut list = vec![json!({ "name": "app", "image": image })];
    if shape == Shape::Sidecars {
        list.push(json!({ "name": "mesh", "image": SIDE_IMAGE }));
        list.push(json!({ "name": "log-agent", "image": SIDE_IMAGE }));
    }
    json!(list)
}

/// The pod template both workloads share (labels `app=<app>`).
pub(super) fn shape_template(shape: Shape, app: &str, sim: &Sim, image: &str) -> serde_json::Value {
    let mut spec = json!({
        "nodeSelector": sim.selector(),
        "tolerations": sim.tolerations(),
        // Long enough for the calibrated drains (the simulator charges the shorter).
        "terminationGracePeriodSeconds": 30,
        "containers": containers(shape, image),
    });
    match shape {
        Shape::Plain => {}
        Shape::Sidecars => {
            spec["initContainers"] = json!([{ "name": "init", "image": SIDE_IMAGE }]);
        }
        Shape::Pull => {
            spec["affinity"] = json!({ "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": { "matchLabels": { "app": app } },
                "topologyKey": "kubernetes.io/hostname",
            }]}});
        }
    }
    json!({ "metadata": { "labels": { "app": app } }, "spec": spec })
}

/// The simulator's flags for `shape`: the equal-cost leg's delays, overridden by the
/// calibration where it measured them.
pub(super) fn sim_flags(args: &Args, shape: Shape, calibration: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(calibration)
        .with_context(|| format!("reading --calibration {}", calibration.display()))?;
    // Fail here, with the bench's own words, rather than in the simulator's log.
    inplace_tests::nodesim::costs::Calibration::find(&text, Some(shape.name())).with_context(
        || {
            format!(
                "--calibration {}: the real node's costs for shape {}",
                calibration.display(),
                shape.name()
            )
        },
    )?;
    let delay = format!("{}ms", millis(&args.update_delay)?.as_millis());
    let ready = format!("{}ms", millis(&args.ready_delay)?.as_millis());
    Ok([
        "--start-delay",
        &delay,
        "--update-delay",
        &delay,
        "--ready-delay",
        &ready,
        "--stats-interval",
        "30s",
        "--calibration",
        &calibration.display().to_string(),
        "--calibration-shape",
        shape.name(),
    ]
    .map(str::to_owned)
    .to_vec())
}

/// The controller's extra flags and the CloneSet's extra annotations for `shape`.
pub(super) fn controller_flags(shape: Shape) -> &'static [&'static str] {
    if shape == Shape::Pull {
        &[GATE_ON]
    } else {
        &[]
    }
}

pub(super) fn annotate(cs: &mut CloneSet, shape: Shape, pods: u32) {
    if shape == Shape::Pull {
        cs.metadata.annotations.get_or_insert_default().insert(
            "apps.kruise.io/image-predownload-parallelism".to_owned(),
            pods.to_string(),
        );
    }
}

/// `versus-deployment[SHAPE]: in-place X s, deployment Y s, speed-up R`.
pub(super) fn shape_line(shape: Shape, in_place: Duration, deployment: Duration) -> String {
    format!(
        "versus-deployment[{}]: in-place {:.2} s, deployment {:.2} s, speed-up {:.2}",
        shape.name(),
        in_place.as_secs_f64(),
        deployment.as_secs_f64(),
        benchcalc::speedup(in_place, deployment)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_the_equal_cost_line_with_the_shape() {
        let l = shape_line(
            Shape::Sidecars,
            Duration::from_millis(10_000),
            Duration::from_millis(35_000),
        );
        assert_eq!(
            l,
            "versus-deployment[sidecars]: in-place 10.00 s, deployment 35.00 s, speed-up 3.50"
        );
        let equal =
            benchcalc::versus_line(Duration::from_millis(10_000), Duration::from_millis(35_000));
        assert_eq!(l.replace("[sidecars]", ""), equal);
    }

    #[test]
    fn every_patch_keeps_the_sidecars() {
        let c = containers(Shape::Sidecars, IMAGE_NEW);
        let names: Vec<&str> = c
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["app", "mesh", "log-agent"]);
        assert_eq!(c[0]["image"], IMAGE_NEW);
        assert_eq!(c[1]["image"], SIDE_IMAGE);
    }
}
