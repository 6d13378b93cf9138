//! What a pod's shape costs on a node, and the calibration that fills it in from a run on
//! the real kubelet. Pure: no I/O and no clock.
//!
//! A new pod pays its sandbox, then each init container in order, then every container's
//! start (the kubelet starts them one after another within a few milliseconds, so the pod
//! pays the longest), the pull of an image its node lacks, and each container's readiness.
//! A deleted pod drains every container at once (preStop hooks, SIGTERM), so it pays the
//! longest drain, never more than its grace period. An in-place update pays only the
//! changed container's restart (and its pull unless the image is on the node already).
//!
//! [`ShapeCosts::default`] charges nothing beyond [`super::model::SimConfig`]'s delays, so
//! the simulator behaves as before unless a calibration is given.

use std::collections::BTreeMap;

use super::model::{Ms, PodView, SimConfig};

/// Costs of one container that differ from the pod-wide ones (by container name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerCosts {
    pub start: Option<Ms>,
    pub ready: Option<Ms>,
    pub drain: Option<Ms>,
}

/// The shape costs beyond [`SimConfig`]'s start, ready and update delays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShapeCosts {
    /// A new pod's sandbox (and its network), before any container.
    pub sandbox: Ms,
    /// Each init container's run, one after another.
    pub init: Ms,
    /// Each container's drain on deletion (`None`: the grace period, capped by `max_grace`).
    pub drain: Option<Ms>,
    /// A container restarted in place is ready this long after it runs (`None`: its
    /// ready delay). A calibration sets 0: its restart figure runs to Ready.
    pub restart_ready: Option<Ms>,
    /// New pods wait for their images on the node (the pull when the node lacks one).
    pub new_pods_pull: bool,
    pub containers: BTreeMap<String, ContainerCosts>,
}

impl ShapeCosts {
    fn of(&self, name: &str) -> Option<&ContainerCosts> {
        self.containers.get(name)
    }
}

/// Container `name`'s start: from the end of the init containers (and its pull) to running.
pub fn start_of(cfg: &SimConfig, name: &str) -> Ms {
    cfg.shape
        .of(name)
        .and_then(|c| c.start)
        .unwrap_or(cfg.start_delay)
}

/// Container `name`'s readiness after a (first) start.
pub fn ready_of(cfg: &SimConfig, name: &str) -> Ms {
    cfg.shape
        .of(name)
        .and_then(|c| c.ready)
        .unwrap_or(cfg.ready_delay)
}

/// Container `name`'s readiness after an in-place restart.
pub fn restart_ready_of(cfg: &SimConfig, name: &str) -> Ms {
    cfg.shape
        .restart_ready
        .unwrap_or_else(|| ready_of(cfg, name))
}

/// When the sandbox and the init containers are done for a pod first seen at `now`.
pub fn containers_begin(cfg: &SimConfig, view: &PodView, now: Ms) -> Ms {
    let inits = i64::try_from(view.init_containers.len()).unwrap_or(i64::MAX);
    now + cfg.shape.sandbox + cfg.shape.init.saturating_mul(inits)
}

/// When each container of a new pod first seen at `now` runs; `image_at(image, from)`
/// tells when `image` is on the node for a pull that would start at `from` (only asked when
/// new pods pull).
pub fn new_pod_running_at(
    cfg: &SimConfig,
    view: &PodView,
    now: Ms,
    image_at: &mut dyn FnMut(&str, Ms) -> Ms,
) -> Vec<Ms> {
    let begin = containers_begin(cfg, view, now);
    view.containers
        .iter()
        .map(|c| {
            let pulled = if cfg.shape.new_pods_pull {
                image_at(&c.image, begin).max(begin)
            } else {
                begin
            };
            pulled + start_of(cfg, &c.name)
        })
        .collect()
}

/// How long a deleted pod drains: its longest container drain, within `grace`.
pub fn pod_drain(cfg: &SimConfig, view: &PodView, grace: Ms) -> Ms {
    let default = cfg.shape.drain.unwrap_or(cfg.max_grace);
    let longest = view
        .containers
        .iter()
        .map(|c| {
            cfg.shape
                .of(&c.name)
                .and_then(|o| o.drain)
                .unwrap_or(default)
        })
        .max()
        .unwrap_or(default);
    grace.clamp(0, longest.max(0))
}

/// Why a calibration could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CalibrationError {
    #[error("no calibration object{} in the input", .0.as_ref().map(|s| format!(" for shape {s:?}")).unwrap_or_default())]
    NotFound(Option<String>),
    #[error("calibration field {field}: {why}")]
    Field { field: String, why: String },
}

/// Per-pod costs measured on the real kubelet, in milliseconds (`None`: not measured).
///
/// Read from the JSON object `versus-deployment-real[SHAPE] costs: {...}` prints
/// (`sandbox_s`, `init_s`, `start_s`, `ready_s`, `drain_s`, `in_place_restart_s`,
/// `pull_s`: medians in seconds, or null), optionally with `containers`: per container name
/// `{start_s, ready_s, drain_s}` where one container differs from the pod-wide figure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Calibration {
    pub shape: Option<String>,
    pub sandbox: Option<Ms>,
    pub init: Option<Ms>,
    pub start: Option<Ms>,
    pub ready: Option<Ms>,
    pub drain: Option<Ms>,
    pub restart: Option<Ms>,
    pub pull: Option<Ms>,
    pub containers: BTreeMap<String, ContainerCosts>,
}

fn secs_field(obj: &serde_json::Value, field: &str) -> Result<Option<Ms>, CalibrationError> {
    match obj.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some((s * 1000.0).round() as Ms)),
            _ => Err(CalibrationError::Field {
                field: field.to_owned(),
                why: format!("want seconds (a number >= 0 or null), got {v}"),
            }),
        },
    }
}

impl Calibration {
    /// The calibration in one JSON object.
    pub fn from_json(obj: &serde_json::Value) -> Result<Self, CalibrationError> {
        let mut containers = BTreeMap::new();
        if let Some(map) = obj.get("containers").and_then(serde_json::Value::as_object) {
            for (name, c) in map {
                let f = |k: &str| {
                    secs_field(c, k).map_err(|e| CalibrationError::Field {
                        field: format!("containers.{name}.{k}"),
                        why: e.to_string(),
                    })
                };
                containers.insert(
                    name.clone(),
                    ContainerCosts {
                        start: f("start_s")?,
                        ready: f("ready_s")?,
                        drain: f("drain_s")?,
                    },
                );
            }
        }
        Ok(Calibration {
            shape: obj
                .get("shape")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            sandbox: secs_field(obj, "sandbox_s")?,
            init: secs_field(obj, "init_s")?,
            start: secs_field(obj, "start_s")?,
            ready: secs_field(obj, "ready_s")?,
            drain: secs_field(obj, "drain_s")?,
            restart: secs_field(obj, "in_place_restart_s")?,
            pull: secs_field(obj, "pull_s")?,
            containers,
        })
    }

    /// The calibration for `shape` (any, if `None`) in `text`: a JSON object, or lines
    /// that each may carry one (`... costs: {...}`, as the real-node bench prints them);
    /// the last matching line wins.
    pub fn find(text: &str, shape: Option<&str>) -> Result<Self, CalibrationError> {
        let fits = |c: &Calibration| shape.is_none_or(|s| c.shape.as_deref() == Some(s));
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(text)
            && v.is_object()
        {
            let c = Self::from_json(&v)?;
            if fits(&c) {
                return Ok(c);
            }
        }
        let mut found = None;
        for line in text.lines() {
            let Some(i) = line.find('{') else { continue };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line[i..]) else {
                continue;
            };
            let c = Self::from_json(&v)?;
            if fits(&c) {
                found = Some(c);
            }
        }
        found.ok_or_else(|| CalibrationError::NotFound(shape.map(str::to_owned)))
    }

    /// The real run's container start of the `pull` shape includes the pull, which the
    /// simulator charges on its own: the start without it.
    fn start_without_pull(&self) -> Option<Ms> {
        match (self.shape.as_deref(), self.start, self.pull) {
            (Some("pull"), Some(s), Some(p)) => Some((s - p).max(0)),
            _ => self.start,
        }
    }

    /// `cfg` charging these costs; the pull time for the node image stores, when measured.
    pub fn apply(&self, cfg: &SimConfig) -> (SimConfig, Option<Ms>) {
        let mut out = cfg.clone();
        if let Some(v) = self.start_without_pull() {
            out.start_delay = v;
        }
        if let Some(v) = self.ready {
            out.ready_delay = v;
        }
        if let Some(v) = self.restart {
            // The measured span runs from the new image in the spec to the pod Ready on it.
            out.update_delay = v;
            out.shape.restart_ready = Some(0);
        }
        out.shape.sandbox = self.sandbox.unwrap_or(out.shape.sandbox);
        out.shape.init = self.init.unwrap_or(out.shape.init);
        if self.drain.is_some() {
            out.shape.drain = self.drain;
        }
        out.shape.new_pods_pull = self.pull.is_some_and(|p| p > 0);
        out.shape.containers.clone_from(&self.containers);
        (out, self.pull.filter(|p| *p > 0))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::nodesim::images::ImageStores;
    use crate::nodesim::model::{ContainerSpec, PodSim, advance};
    use proptest::prelude::*;

    fn spec(name: &str, image: &str) -> ContainerSpec {
        ContainerSpec {
            name: name.into(),
            image: image.into(),
        }
    }

    fn sidecars_view() -> PodView {
        PodView {
            uid: "u".into(),
            init_containers: vec![spec("init", "reg/init:v1")],
            containers: vec![
                spec("app", "reg/app:v1"),
                spec("mesh", "reg/mesh:v1"),
                spec("logs", "reg/logs:v1"),
            ],
            ..PodView::default()
        }
    }

    const SIDECARS: &str = r#"versus-deployment-real[sidecars] costs: {"shape":"sidecars","pods":30,"sandbox_s":0.4,"init_s":1.2,"start_s":0.3,"ready_s":1.0,"drain_s":3.1,"new_pod_s":5.0,"in_place_restart_s":1.5,"pull_s":null,"containers":{"mesh":{"ready_s":3.0,"drain_s":3.0},"logs":{"ready_s":2.0}}}"#;

    #[test]
    fn defaults_charge_what_the_simulator_charged_before() {
        let cfg = SimConfig::default();
        let v = sidecars_view();
        let mut never = |_: &str, _: Ms| panic!("no pull without a calibration");
        let at = new_pod_running_at(&cfg, &v, 1_000, &mut never);
        assert_eq!(at, vec![1_000 + cfg.start_delay; 3]);
        for grace in [0, 500, 30_000] {
            assert_eq!(pod_drain(&cfg, &v, grace), grace.clamp(0, cfg.max_grace));
        }
        assert_eq!(restart_ready_of(&cfg, "app"), cfg.ready_delay);
    }

    #[test]
    fn reads_the_real_benchs_line_among_others() {
        let text = format!(
            "versus-deployment-real[plain]: in-place 1 s, deployment 2 s, speed-up 2.00\n\
             versus-deployment-real[plain] costs: {{\"shape\":\"plain\",\"sandbox_s\":0.5}}\n{SIDECARS}\n"
        );
        let c = Calibration::find(&text, Some("sidecars")).expect("sidecars line");
        assert_eq!(c.sandbox, Some(400));
        assert_eq!(c.init, Some(1_200));
        assert_eq!(c.pull, None);
        assert_eq!(c.containers["mesh"].drain, Some(3_000));
        let p = Calibration::find(&text, Some("plain")).expect("plain line");
        assert_eq!((p.sandbox, p.start), (Some(500), None));
        assert_eq!(
            Calibration::find(&text, Some("pull")),
            Err(CalibrationError::NotFound(Some("pull".into())))
        );
        let bad = Calibration::find(r#"{"shape":"plain","start_s":"slow"}"#, None);
        assert!(matches!(bad, Err(CalibrationError::Field { field, .. }) if field == "start_s"));
    }

    #[test]
    fn a_new_sidecars_pod_pays_sandbox_init_longest_start_and_ready() {
        let c = Calibration::find(SIDECARS, Some("sidecars")).expect("parse");
        let (cfg, pull) = c.apply(&SimConfig::default());
        assert_eq!(pull, None);
        let v = sidecars_view();
        let mut no_pull = |_: &str, from: Ms| from;
        let running = new_pod_running_at(&cfg, &v, 0, &mut no_pull);
        // sandbox 400 + one init 1,200 + start 300, every container.
        assert_eq!(running, vec![1_900; 3]);
        let ready: Vec<Ms> = v
            .containers
            .iter()
            .zip(&running)
            .map(|(c, at)| at + ready_of(&cfg, &c.name))
            .collect();
        assert_eq!(ready, vec![2_900, 4_900, 3_900]);
        // The pod is Ready when its slowest container is: sandbox + init + start + 3 s.
        assert_eq!(ready.iter().max(), Some(&(400 + 1_200 + 300 + 3_000)));
        // Deleted: the longest drain (mesh 3 s), within the grace period.
        assert_eq!(pod_drain(&cfg, &v, 30_000), 3_100);
        assert_eq!(pod_drain(&cfg, &v, 2_000), 2_000);
        // In place: one container's restart to Ready (1.5 s), no readiness on top.
        assert_eq!(cfg.update_delay, 1_500);
        assert_eq!(restart_ready_of(&cfg, "app"), 0);
    }

    #[test]
    fn the_pull_shape_does_not_pay_its_pull_twice() {
        let c = Calibration::find(
            r#"{"shape":"pull","sandbox_s":0.5,"start_s":12.5,"ready_s":1,"in_place_restart_s":1.2,"pull_s":12}"#,
            Some("pull"),
        )
        .expect("parse");
        let (cfg, pull) = c.apply(&SimConfig::default());
        assert_eq!(pull, Some(12_000));
        assert_eq!(cfg.start_delay, 500);
        assert!(cfg.shape.new_pods_pull);
        let v = PodView {
            containers: vec![spec("app", "reg/big:v2")],
            ..PodView::default()
        };
        let mut pulls = 0;
        let mut image_at = |_: &str, from: Ms| {
            pulls += 1;
            from + 12_000
        };
        assert_eq!(
            new_pod_running_at(&cfg, &v, 0, &mut image_at),
            vec![500 + 12_000 + 500]
        );
        assert_eq!(pulls, 1);
    }

    /// The pod's Ready time, advancing it from `from` through its due times.
    fn ready_at(v: &PodView, sim: &mut PodSim, from: Ms, cfg: &SimConfig) -> Ms {
        let mut now = from;
        for _ in 0..32 {
            let step = advance(v, sim, now, cfg);
            if sim.ready.status {
                return now;
            }
            now = step.next_due.expect("a pod not Ready has something due");
        }
        panic!("not Ready after 32 steps");
    }

    #[test]
    fn in_place_only_the_changed_container_restarts() {
        let c = Calibration::find(SIDECARS, Some("sidecars")).expect("parse");
        let (cfg, _) = c.apply(&SimConfig::default());
        let mut v = sidecars_view();
        let mut sim = PodSim::new(&v, String::new(), String::new(), 0, &cfg);
        assert_eq!(ready_at(&v, &mut sim, 0, &cfg), 400 + 1_200 + 300 + 3_000);
        let before = sim.containers.clone();
        v.containers[0].image = "reg/app:v2".into();
        // The restart figure runs to Ready: nothing else is charged.
        assert_eq!(ready_at(&v, &mut sim, 10_000, &cfg), 10_000 + 1_500);
        assert_eq!(sim.containers[0].restart_count, 1);
        assert_eq!(sim.containers[0].image, "reg/app:v2");
        assert_eq!(
            sim.containers[1..],
            before[1..],
            "the sidecars run on untouched"
        );
    }

    #[test]
    fn a_pull_is_paid_once_per_node_and_image() {
        let (cfg, pull) = Calibration::find(
            r#"{"shape":"pull","start_s":10.2,"ready_s":0.5,"pull_s":10}"#,
            None,
        )
        .expect("parse")
        .apply(&SimConfig::default());
        let mut stores = ImageStores::new(pull.expect("a pull figure"));
        let v = PodView {
            containers: vec![spec("app", "reg/big:v2")],
            ..PodView::default()
        };
        let mut on = |node: &str, now: Ms| {
            let mut image_at = |image: &str, from: Ms| stores.available_at(node, image, from);
            let mut sim =
                PodSim::new_with(&v, String::new(), String::new(), now, &cfg, &mut image_at);
            ready_at(&v, &mut sim, now, &cfg)
        };
        // The first pod on a node pulls; the next one, mid-pull, waits for the rest of it;
        // a later one finds the image; another node pulls again.
        assert_eq!(on("a", 0), 10_000 + 200 + 500);
        assert_eq!(on("a", 4_000), 10_000 + 200 + 500);
        assert_eq!(on("a", 20_000), 20_000 + 200 + 500);
        assert_eq!(on("b", 20_000), 30_000 + 200 + 500);
        assert_eq!(stores.pulls, 2);
    }

    proptest! {
        /// A new pod runs its containers no sooner than sandbox + every init container
        /// + its own start, and its drain never exceeds the grace period nor the longest
        /// container drain.
        #[test]
        fn new_pod_and_drain_bounds(
            sandbox in 0i64..5_000, init in 0i64..5_000, inits in 0usize..4,
            starts in proptest::collection::vec(0i64..5_000, 1..5),
            drains in proptest::collection::vec(0i64..10_000, 1..5),
            grace in 0i64..20_000, now in 0i64..1_000_000,
        ) {
            let mut cfg = SimConfig::default();
            cfg.shape.sandbox = sandbox;
            cfg.shape.init = init;
            let names: Vec<String> = (0..starts.len().max(drains.len())).map(|i| format!("c{i}")).collect();
            for (i, n) in names.iter().enumerate() {
                cfg.shape.containers.insert(n.clone(), ContainerCosts {
                    start: starts.get(i).copied(),
                    ready: None,
                    drain: drains.get(i).copied(),
                });
            }
            let v = PodView {
                init_containers: (0..inits).map(|i| spec(&format!("i{i}"), "x")).collect(),
                containers: names.iter().map(|n| spec(n, "y")).collect(),
                ..PodView::default()
            };
            let mut no_pull = |_: &str, from: Ms| from;
            let at = new_pod_running_at(&cfg, &v, now, &mut no_pull);
            let begin = now + sandbox + init * inits as i64;
            for (i, t) in at.iter().enumerate() {
                prop_assert_eq!(*t, begin + starts.get(i).copied().unwrap_or(cfg.start_delay));
            }
            let d = pod_drain(&cfg, &v, grace);
            let longest = (0..names.len()).map(|i| drains.get(i).copied().unwrap_or(cfg.max_grace)).max().unwrap_or(0);
            prop_assert_eq!(d, grace.min(longest));
        }
    }
}
